package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// testUUID keeps region images, and so crash draws, identical across runs.
var testUUID = [16]byte{0xba, 0x5a, 0x17, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

var errPowerLost = errors.New("test: power lost")

const headerBlock = 4096

// record is what a test expects a Buffer to hold.
type record struct {
	Seq     cache.Seq
	Kind    cache.Kind
	Payload []byte
}

func (r record) String() string {
	return fmt.Sprintf("{%v kind %v %d bytes}", r.Seq, r.Kind, len(r.Payload))
}

// openFake formats a Fake with a log of logSize bytes.
func openFake(t testing.TB, logSize int, seed int64) (*cache.Buffer, *pmem.Fake) {
	t.Helper()
	f := pmem.NewFake(headerBlock+logSize, seed)
	b, err := cache.Open(f, cache.Options{UUID: testUUID})
	if err != nil {
		t.Fatal(err)
	}
	return b, f
}

// payloadFor is a payload of n bytes that names its seq, so that a record
// recovered in the wrong place is seen.
func payloadFor(seq cache.Seq, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(uint64(seq)*31 + uint64(i)*7)
	}
	return p
}

func mustAppend(t testing.TB, b *cache.Buffer, kind cache.Kind, payload []byte) cache.Seq {
	t.Helper()
	seq, err := b.Append(context.Background(), kind, payload)
	if err != nil {
		t.Fatalf("Append(kind %v, %d bytes): %v", kind, len(payload), err)
	}
	return seq
}

// replayAll returns the Buffer's live records.
func replayAll(t testing.TB, b *cache.Buffer) []record {
	t.Helper()
	var got []record
	err := b.Replay(func(seq cache.Seq, kind cache.Kind, payload []byte) error {
		got = append(got, record{seq, kind, bytes.Clone(payload)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return got
}

// checkRecords fails unless got equals want, and Stats and Read agree.
func checkRecords(t testing.TB, b *cache.Buffer, want []record) {
	t.Helper()
	got := replayAll(t, b)
	if msg := diffRecords(got, want); msg != "" {
		t.Fatal(msg)
	}
	st := b.Stats()
	if st.Live != len(want) || (len(want) > 0 && (st.First != want[0].Seq || st.Last != want[len(want)-1].Seq)) {
		t.Fatalf("Stats: Live %d First %v Last %v; want %d records %v", st.Live, st.First, st.Last, len(want), want)
	}
	for _, r := range want {
		kind, payload, err := b.Read(r.Seq, nil)
		if err != nil || kind != r.Kind || !bytes.Equal(payload, r.Payload) {
			t.Fatalf("Read(%v) = kind %v, %d bytes, %v; want %v", r.Seq, kind, len(payload), err, r)
		}
	}
}

func diffRecords(got, want []record) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d records %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].Kind != want[i].Kind || !bytes.Equal(got[i].Payload, want[i].Payload) {
			return fmt.Sprintf("record %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}

// reopen closes b and opens the same region again.
func reopen(t testing.TB, b *cache.Buffer, r pmem.Region) *cache.Buffer {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := cache.Open(r, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crashAndOpen opens the image a power loss would leave on f now.
func crashAndOpen(t testing.TB, f *pmem.Fake) (*cache.Buffer, *pmem.Fake) {
	t.Helper()
	crashed := f.CrashRegion()
	b, err := cache.Open(crashed, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, crashed
}

// appendMakingRoom releases every live record first if the append might have
// to wait for space (room for the record and the worst padding before it).
func appendMakingRoom(t testing.TB, b *cache.Buffer, kind cache.Kind, payload []byte) cache.Seq {
	t.Helper()
	if st := b.Stats(); st.Live > 0 && st.Used+2*int64(len(payload)+104) > st.Size {
		if err := b.Release(st.Last); err != nil {
			t.Fatal(err)
		}
	}
	return mustAppend(t, b, kind, payload)
}
