package cache_test

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"basalt/cache"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestAppendBlocksRecordsSumsOfTheCopy: the payload is head, the blocks'
// CRC32Cs, the blocks; Read, View and recovery after a crash return it.
func TestAppendBlocksRecordsSumsOfTheCopy(t *testing.T) {
	b, f := openFake(t, 1<<16, 1)
	head := []byte("head-16-bytes...")
	data := payloadFor(7, 3*cache.BlockSize)
	seq, err := b.AppendBlocks(context.Background(), 5, head, data)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{}, head...)
	for i := range 3 {
		want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(data[i*cache.BlockSize:(i+1)*cache.BlockSize], castagnoli))
	}
	want = append(want, data...)
	kind, got, err := b.Read(seq, nil)
	if err != nil || kind != 5 || string(got) != string(want) {
		t.Fatalf("Read = kind %v, %d bytes, %v; want kind 5, %d bytes as built", kind, len(got), err, len(want))
	}
	kind, view, err := b.View(seq)
	if err != nil || kind != 5 || string(view) != string(want) {
		t.Fatalf("View = kind %v, %d bytes, %v; want the same payload", kind, len(view), err)
	}
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, []record{{seq, 5, want}})
}

func TestAppendBlocksRefusesPartialBlocks(t *testing.T) {
	b, _ := openFake(t, 1<<16, 1)
	if _, err := b.AppendBlocks(context.Background(), 1, nil, make([]byte, 100)); !errors.Is(err, cache.ErrBadBlocks) {
		t.Fatalf("AppendBlocks of 100 bytes = %v, want ErrBadBlocks", err)
	}
	if st := b.Stats(); st.Last != 0 {
		t.Fatalf("a refused AppendBlocks left record %v", st.Last)
	}
}

// TestViewErrors: View refuses what Read refuses.
func TestViewErrors(t *testing.T) {
	b, _ := openFake(t, 1<<16, 1)
	seq := mustAppend(t, b, 1, []byte("x"))
	if _, _, err := b.View(seq + 1); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("View of an unwritten record = %v, want ErrNotFound", err)
	}
	if err := b.Release(seq); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.View(seq); !errors.Is(err, cache.ErrReleased) {
		t.Errorf("View of a released record = %v, want ErrReleased", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.View(seq); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("View after Close = %v, want ErrClosed", err)
	}
}
