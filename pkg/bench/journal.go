package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Journal layout (see the package documentation for the byte diagrams).
const (
	journalHeaderSize = 64
	journalRecordSize = 32
	journalVersion    = 1
)

var journalMagic = [8]byte{'B', 'S', 'L', 'T', 'J', 'R', 'N', 'L'}

// RecordKind is the kind of a journal record.
type RecordKind uint8

// Record kinds.
const (
	// RecIntent: generation Gen of the units is about to be submitted. It is
	// durable before the write is sent.
	RecIntent RecordKind = 1
	// RecAck: the write of generation Gen completed successfully.
	RecAck RecordKind = 2
)

// JournalHeader describes the run a journal belongs to.
type JournalHeader struct {
	LBASize uint32
	Offset  int64 // region start, bytes
	Size    int64 // region length, bytes
	Seed    uint64
}

func (h JournalHeader) encode(b []byte) {
	clear(b[:journalHeaderSize])
	copy(b, journalMagic[:])
	binary.LittleEndian.PutUint32(b[8:], journalVersion)
	binary.LittleEndian.PutUint32(b[12:], h.LBASize)
	binary.LittleEndian.PutUint32(b[16:], VerifyUnit)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Offset))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Size))
	binary.LittleEndian.PutUint64(b[40:], h.Seed)
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
}

func decodeJournalHeader(b []byte) (JournalHeader, error) {
	if len(b) < journalHeaderSize || [8]byte(b[:8]) != journalMagic {
		return JournalHeader{}, fmt.Errorf("%w: not a basalt-bench journal", ErrJournal)
	}
	if crc32.Checksum(b[:60], castagnoli) != binary.LittleEndian.Uint32(b[60:]) {
		return JournalHeader{}, fmt.Errorf("%w: header checksum mismatch", ErrJournal)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != journalVersion {
		return JournalHeader{}, fmt.Errorf("%w: version %d, want %d", ErrJournal, v, journalVersion)
	}
	if u := binary.LittleEndian.Uint32(b[16:]); u != VerifyUnit {
		return JournalHeader{}, fmt.Errorf("%w: verify unit %d, want %d", ErrJournal, u, VerifyUnit)
	}
	h := JournalHeader{
		LBASize: binary.LittleEndian.Uint32(b[12:]),
		Offset:  int64(binary.LittleEndian.Uint64(b[24:])),
		Size:    int64(binary.LittleEndian.Uint64(b[32:])),
		Seed:    binary.LittleEndian.Uint64(b[40:]),
	}
	if h.LBASize == 0 || VerifyUnit%h.LBASize != 0 || h.Offset < 0 || h.Size <= 0 ||
		h.Offset%VerifyUnit != 0 || h.Size%VerifyUnit != 0 || h.Size/VerifyUnit > 1<<32 {
		return JournalHeader{}, fmt.Errorf("%w: impossible geometry %+v", ErrJournal, h)
	}
	return h, nil
}

// JournalRecord is one journal entry: Units consecutive 4 KiB units from
// device LBA LBA, generation Gen.
type JournalRecord struct {
	Kind  RecordKind
	Units uint32
	LBA   uint64
	Gen   uint64
}

func (r JournalRecord) encode(b []byte) {
	clear(b[:journalRecordSize])
	b[0] = byte(r.Kind)
	binary.LittleEndian.PutUint32(b[4:], r.Units)
	binary.LittleEndian.PutUint64(b[8:], r.LBA)
	binary.LittleEndian.PutUint64(b[16:], r.Gen)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

// decodeJournalRecord returns ok false for a record that is torn or corrupt.
func decodeJournalRecord(b []byte) (JournalRecord, bool) {
	if crc32.Checksum(b[:28], castagnoli) != binary.LittleEndian.Uint32(b[28:]) {
		return JournalRecord{}, false
	}
	r := JournalRecord{Kind: RecordKind(b[0]), Units: binary.LittleEndian.Uint32(b[4:]),
		LBA: binary.LittleEndian.Uint64(b[8:]), Gen: binary.LittleEndian.Uint64(b[16:])}
	if (r.Kind != RecIntent && r.Kind != RecAck) || r.Units == 0 || r.Gen == 0 {
		return JournalRecord{}, false
	}
	return r, true
}

// Journal is an append-only record of which generation of which units was
// submitted and acknowledged, so that a run can be killed (the bench or the
// target) and checked afterwards (like fio's verify state and vdbench's
// journal). Append buffers records; Sync writes and fdatasyncs them. Safe
// for concurrent use.
type Journal struct {
	mu  sync.Mutex
	f   *os.File
	hdr JournalHeader
	buf []byte
}

// CreateJournal creates a new, empty journal at path (replacing any file).
func CreateJournal(path string, h JournalHeader) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: creating journal: %w", err)
	}
	var b [journalHeaderSize]byte
	h.encode(b[:])
	if _, err := f.Write(b[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: writing journal header: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: syncing journal: %w", err)
	}
	return &Journal{f: f, hdr: h, buf: make([]byte, 0, 64<<10)}, nil
}

// Header returns the journal's header.
func (j *Journal) Header() JournalHeader { return j.hdr }

// Append buffers records; they become durable at the next Sync. It does not
// allocate once the buffer has grown to the largest batch.
func (j *Journal) Append(recs ...JournalRecord) {
	j.mu.Lock()
	for _, r := range recs {
		n := len(j.buf)
		j.buf = append(j.buf, make([]byte, journalRecordSize)...)
		r.encode(j.buf[n:])
	}
	j.mu.Unlock()
}

// Sync writes the buffered records and waits until they are durable.
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.buf) == 0 {
		return nil
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("bench: writing journal: %w", err)
	}
	j.buf = j.buf[:0]
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("bench: syncing journal: %w", err)
	}
	return nil
}

// Close syncs and closes the journal.
func (j *Journal) Close() error {
	err := j.Sync()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// JournalState is a journal replayed: for every 4 KiB unit of the region,
// the generation last acknowledged, and the writes still in flight
// (submitted, never acknowledged) when the journal ends.
type JournalState struct {
	Header  JournalHeader
	Acked   []uint64 // by unit index within the region; 0 = never acknowledged
	Pending map[uint64]JournalRecord
	MaxGen  uint64
	Records int
	// TornBytes counts bytes after the last valid record (a write cut short
	// by a crash): ignored, and cut off when the journal is reopened.
	TornBytes int64
	validEnd  int64
}

// unit returns the unit index of device LBA lba, or false if outside.
func (s *JournalState) unit(lba uint64) (int, bool) {
	off := int64(lba) * int64(s.Header.LBASize)
	if off < s.Header.Offset || off >= s.Header.Offset+s.Header.Size || off%VerifyUnit != 0 {
		return 0, false
	}
	return int((off - s.Header.Offset) / VerifyUnit), true
}

// InFlight returns, per unit index, the generations that were in flight for it.
func (s *JournalState) InFlight() map[int][]uint64 {
	m := map[int][]uint64{}
	for _, r := range s.Pending {
		u, _ := s.unit(r.LBA)
		for i := range int(r.Units) {
			m[u+i] = append(m[u+i], r.Gen)
		}
	}
	return m
}

// ReadJournal replays the journal at path.
func ReadJournal(path string) (*JournalState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: opening journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var hb [journalHeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, fmt.Errorf("%w: short header: %w", ErrJournal, err)
	}
	h, err := decodeJournalHeader(hb[:])
	if err != nil {
		return nil, err
	}
	s := &JournalState{Header: h, Acked: make([]uint64, h.Size/VerifyUnit),
		Pending: map[uint64]JournalRecord{}, validEnd: journalHeaderSize}
	var rb [journalRecordSize]byte
	for {
		_, err := io.ReadFull(r, rb[:])
		if errors.Is(err, io.EOF) {
			break
		}
		rec, ok := decodeJournalRecord(rb[:])
		if err != nil || !ok {
			st, serr := f.Stat()
			if serr != nil {
				return nil, fmt.Errorf("bench: journal: %w", serr)
			}
			s.TornBytes = st.Size() - s.validEnd
			break
		}
		if err := s.apply(rec); err != nil {
			return nil, err
		}
		s.validEnd += journalRecordSize
	}
	return s, nil
}

func (s *JournalState) apply(r JournalRecord) error {
	u, ok := s.unit(r.LBA)
	if !ok || u+int(r.Units) > len(s.Acked) {
		return fmt.Errorf("%w: record %d (%+v) lies outside the region", ErrJournal, s.Records, r)
	}
	s.Records++
	s.MaxGen = max(s.MaxGen, r.Gen)
	switch r.Kind {
	case RecIntent:
		s.Pending[r.Gen] = r
	case RecAck:
		delete(s.Pending, r.Gen)
		for i := range int(r.Units) {
			s.Acked[u+i] = max(s.Acked[u+i], r.Gen)
		}
	}
	return nil
}

// rewriteJournal replaces the journal at path with one that holds only the
// given acknowledged state (one record per run of units), atomically.
func rewriteJournal(path string, h JournalHeader, acked []uint64) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	j, err := CreateJournal(tmp, h)
	if err != nil {
		return err
	}
	lbasPerUnit := uint64(VerifyUnit / h.LBASize)
	first := uint64(h.Offset) / uint64(h.LBASize)
	for u := 0; u < len(acked); {
		if acked[u] == 0 {
			u++
			continue
		}
		n := 1
		for u+n < len(acked) && acked[u+n] == acked[u] {
			n++
		}
		j.Append(JournalRecord{Kind: RecAck, Units: uint32(n), LBA: first + uint64(u)*lbasPerUnit, Gen: acked[u]})
		u += n
		if len(j.buf) > 1<<20 {
			if err := j.Sync(); err != nil {
				j.Close()
				return err
			}
		}
	}
	if err := j.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("bench: replacing journal: %w", err)
	}
	return nil
}

// openJournalAppend reopens a replayed journal for appending after its last
// valid record.
func openJournalAppend(path string, s *JournalState) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: reopening journal: %w", err)
	}
	if err := f.Truncate(s.validEnd); err == nil {
		_, err = f.Seek(s.validEnd, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: reopening journal: %w", err)
	}
	return &Journal{f: f, hdr: s.Header, buf: make([]byte, 0, 64<<10)}, nil
}
