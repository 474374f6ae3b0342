package bench

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestJournalReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	h := JournalHeader{LBASize: 512, Offset: 1 << 20, Size: 1 << 20, Seed: 9}
	j, err := CreateJournal(path, h)
	if err != nil {
		t.Fatal(err)
	}
	lba := func(unit int) uint64 { return uint64(h.Offset/512) + uint64(unit*8) }
	j.Append(JournalRecord{Kind: RecIntent, Units: 2, LBA: lba(0), Gen: 1},
		JournalRecord{Kind: RecIntent, Units: 1, LBA: lba(5), Gen: 2})
	j.Append(JournalRecord{Kind: RecAck, Units: 2, LBA: lba(0), Gen: 1})
	j.Append(JournalRecord{Kind: RecIntent, Units: 1, LBA: lba(1), Gen: 3})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Header != h || s.Records != 4 || s.MaxGen != 3 || s.TornBytes != 0 {
		t.Fatalf("replay %+v", s)
	}
	if s.Acked[0] != 1 || s.Acked[1] != 1 || s.Acked[5] != 0 {
		t.Fatalf("acked %v", s.Acked[:6])
	}
	in := s.InFlight()
	if len(s.Pending) != 2 || len(in[1]) != 1 || in[1][0] != 3 || in[5][0] != 2 {
		t.Fatalf("in flight %v", in)
	}

	// A crash in the middle of a record: the torn tail is ignored on
	// replay and cut off when reopened for appending.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{2, 0, 0, 0, 1, 0, 0})
	f.Close()
	s, err = ReadJournal(path)
	if err != nil || s.Records != 4 || s.TornBytes != 7 {
		t.Fatalf("torn replay: %v, %+v", err, s)
	}
	j, err = openJournalAppend(path, s)
	if err != nil {
		t.Fatal(err)
	}
	j.Append(JournalRecord{Kind: RecAck, Units: 1, LBA: lba(1), Gen: 3})
	j.Close()
	s, err = ReadJournal(path)
	if err != nil || s.Records != 5 || s.TornBytes != 0 || s.Acked[1] != 3 || len(s.Pending) != 1 {
		t.Fatalf("after reopen: %v, %+v", err, s)
	}
}

func TestJournalRejectsMalformedInput(t *testing.T) {
	good := make([]byte, journalHeaderSize)
	JournalHeader{LBASize: 4096, Size: 1 << 20, Seed: 1}.encode(good)
	rec := make([]byte, journalRecordSize)
	cases := []struct {
		name string
		data func() []byte
	}{
		{"empty", func() []byte { return nil }},
		{"short header", func() []byte { return good[:40] }},
		{"bad magic", func() []byte { b := clone(good); b[0] = 'X'; return b }},
		{"bad header crc", func() []byte { b := clone(good); b[41] ^= 1; return b }},
		{"bad geometry", func() []byte {
			b := make([]byte, journalHeaderSize)
			JournalHeader{LBASize: 3000, Size: 1 << 20}.encode(b)
			return b
		}},
		{"record outside region", func() []byte {
			JournalRecord{Kind: RecAck, Units: 1, LBA: 1 << 30, Gen: 1}.encode(rec)
			return append(clone(good), rec...)
		}},
		{"record overruns region", func() []byte {
			JournalRecord{Kind: RecAck, Units: 300, LBA: 0, Gen: 1}.encode(rec)
			return append(clone(good), rec...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j")
			os.WriteFile(path, c.data(), 0o644)
			if _, err := ReadJournal(path); !errors.Is(err, ErrJournal) {
				t.Fatalf("ReadJournal = %v, want ErrJournal", err)
			}
		})
	}
	for _, r := range []JournalRecord{{Kind: 7, Units: 1, Gen: 1}, {Kind: RecAck, Units: 0, Gen: 1}, {Kind: RecAck, Units: 1, Gen: 0}} {
		r.encode(rec)
		if _, ok := decodeJournalRecord(rec); ok {
			t.Errorf("record %+v accepted", r)
		}
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func FuzzReadJournal(f *testing.F) {
	good := make([]byte, journalHeaderSize)
	JournalHeader{LBASize: 4096, Size: 1 << 20, Seed: 1}.encode(good)
	rec := make([]byte, journalRecordSize)
	JournalRecord{Kind: RecIntent, Units: 3, LBA: 8, Gen: 5}.encode(rec)
	f.Add(append(clone(good), rec...))
	f.Add(good)
	f.Add([]byte("BSLTJRNL"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "j")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := ReadJournal(path)
		if err != nil {
			if !errors.Is(err, ErrJournal) {
				t.Fatalf("error %v does not wrap ErrJournal", err)
			}
			return
		}
		if int64(s.Records)*journalRecordSize+journalHeaderSize+s.TornBytes != int64(len(data)) {
			t.Fatalf("records %d + torn %d do not add up to %d bytes", s.Records, s.TornBytes, len(data))
		}
	})
}
