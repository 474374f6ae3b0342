package volume

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
)

func newTestVolume(t testing.TB, size int64) (*Volume, *backend.Memory) {
	mem, err := backend.NewMemory(size, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return newVolume(mem, clock.Real()), mem
}

// TestVolumeSnapshotRestoresByteForByte streams a replica with data, holes
// and runs that cross extents into another replica holding other data.
func TestVolumeSnapshotRestoresByteForByte(t *testing.T) {
	ctx := context.Background()
	const size = 3<<20 + 4096*5
	src, srcMem := newTestVolume(t, size)
	for _, w := range []struct {
		off int64
		n   int
		b   byte
	}{{0, 4096, 1}, {8192, 3 * 4096, 2}, {1<<20 - 4096, 8192, 3}, {size - 4096, 4096, 4}} {
		if err := srcMem.WriteAt(ctx, bytes.Repeat([]byte{w.b}, w.n), w.off, 0); err != nil {
			t.Fatal(err)
		}
	}
	var stream bytes.Buffer
	if err := src.Snapshot(&stream); err != nil {
		t.Fatal(err)
	}
	if stream.Len() > 64<<10 {
		t.Errorf("snapshot of a mostly empty volume is %d bytes; zero runs should make it small", stream.Len())
	}
	dst, dstMem := newTestVolume(t, size)
	if err := dstMem.WriteAt(ctx, bytes.Repeat([]byte{9}, 1<<20), 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(bytes.NewReader(stream.Bytes()), 77); err != nil {
		t.Fatal(err)
	}
	want, got := make([]byte, size), make([]byte, size)
	_ = srcMem.ReadAt(ctx, want, 0)
	_ = dstMem.ReadAt(ctx, got, 0)
	if !bytes.Equal(got, want) {
		t.Fatal("restored replica differs")
	}
	if dst.AppliedIndex() != 77 {
		t.Fatalf("AppliedIndex after Restore = %d, want 77", dst.AppliedIndex())
	}
}

func TestVolumeRestoreRejectsMalformedStreams(t *testing.T) {
	src, srcMem := newTestVolume(t, 64<<10)
	_ = srcMem.WriteAt(context.Background(), bytes.Repeat([]byte{5}, 4096), 8192, 0)
	var stream bytes.Buffer
	if err := src.Snapshot(&stream); err != nil {
		t.Fatal(err)
	}
	good := stream.Bytes()
	mutate := func(at int, v byte) []byte { b := bytes.Clone(good); b[at] ^= v; return b }
	other, _ := newTestVolume(t, 128<<10)
	var otherStream bytes.Buffer
	_ = other.Snapshot(&otherStream)
	tests := map[string][]byte{
		"empty":             nil,
		"header only":       good[:snapHeaderSize],
		"bad magic":         mutate(0, 1),
		"other geometry":    otherStream.Bytes(),
		"flipped data":      mutate(len(good)-snapRunSize-100, 1),
		"run kind":          mutate(snapHeaderSize, 0x40),
		"truncated":         good[:len(good)-1],
		"run out of order":  mutate(snapHeaderSize+8, 0x10),
		"bad end checksum":  mutate(len(good)-16, 1),
		"missing end":       good[:len(good)-snapRunSize],
		"reserved run byte": mutate(snapHeaderSize+3, 1),
	}
	for name, b := range tests {
		dst, _ := newTestVolume(t, 64<<10)
		if err := dst.Restore(bytes.NewReader(b), 1); err == nil {
			t.Errorf("%s: Restore accepted a malformed stream", name)
		} else if name != "empty" && name != "header only" && name != "truncated" && name != "missing end" &&
			!errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzVolumeRestore(f *testing.F) {
	src, srcMem := newTestVolume(f, 32<<10)
	_ = srcMem.WriteAt(context.Background(), bytes.Repeat([]byte{5}, 4096), 4096, 0)
	var stream bytes.Buffer
	_ = src.Snapshot(&stream)
	f.Add(stream.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		dst, _ := newTestVolume(t, 32<<10)
		_ = dst.Restore(bytes.NewReader(b), 1)
	})
}
