package cache_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// fuzzRegionSize keeps fuzz inputs small: the header block and a 1 KiB log.
// A FuzzOpen input is the two header slots (256 bytes) and the log; the rest
// of the header block stays zero, as Open requires of it.
const (
	fuzzRegionSize = headerBlock + 1024
	fuzzSlotsSize  = 256
)

func fuzzInput(image []byte) []byte {
	return append(image[:fuzzSlotsSize:fuzzSlotsSize], image[headerBlock:]...)
}

func fuzzImage(input []byte) []byte {
	image := make([]byte, fuzzRegionSize)
	n := copy(image[:fuzzSlotsSize], input)
	copy(image[headerBlock:], input[n:])
	return image
}

// fuzzImages are seed regions: blank, formatted, holding wrapped records, torn.
func fuzzImages(t testing.TB) [][]byte {
	blank := make([]byte, fuzzRegionSize)
	b, f := openFake(t, 1024, 1)
	formatted := f.Persisted()
	for i := range 12 {
		appendMakingRoom(t, b, cache.Kind(i), payloadFor(cache.Seq(i), 40+i*20))
	}
	wrapped := f.Persisted()
	torn := f.Crash()
	if err := b.Truncate(b.Stats().Last); err != nil {
		t.Fatal(err)
	}
	truncated := f.Persisted()
	b.Close()
	closed := f.Persisted()
	return [][]byte{blank, formatted, wrapped, torn, truncated, closed}
}

// FuzzOpen opens arbitrary region bytes. Open must not panic, must refuse only
// with ErrCorrupt, and what it accepts must be a working log: Stats agrees with
// Replay, a clean Close and reopen find the same records, and a new record can
// be appended and read back.
func FuzzOpen(f *testing.F) {
	for _, image := range fuzzImages(f) {
		f.Add(fuzzInput(image))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		region := pmem.NewFakeImage(fuzzImage(input), 1)
		b, err := cache.Open(region, cache.Options{})
		if err != nil {
			if !errors.Is(err, cache.ErrCorrupt) {
				t.Fatalf("Open refused with %v, want ErrCorrupt", err)
			}
			return
		}
		got := replayAll(t, b)
		for i := 1; i < len(got); i++ {
			if got[i].Seq != got[i-1].Seq+1 {
				t.Fatalf("recovered seqs %v then %v", got[i-1].Seq, got[i].Seq)
			}
		}
		checkRecords(t, b, got)
		b = reopen(t, b, region)
		checkRecords(t, b, got)
		if len(got) > 0 {
			if err := b.Release(got[len(got)-1].Seq); err != nil {
				t.Fatal(err)
			}
		}
		seq := mustAppend(t, b, 1, []byte("after"))
		if _, p, err := b.Read(seq, nil); err != nil || string(p) != "after" {
			t.Fatalf("Read of a new record: %q, %v", p, err)
		}
	})
}

// FuzzRecover builds a log from ops (each byte an append of a size derived
// from it, or a release), crashes it, damages the image at the places damage
// names (pairs of a 16-bit offset and an XOR mask), and opens it. Open must not
// panic, must refuse only with ErrCorrupt, and every record it returns must be
// one the workload appended under that seq, in a gap-free run.
func FuzzRecover(f *testing.F) {
	f.Add([]byte{10, 200, 50, 250, 90, 255, 30, 30, 30}, []byte{})
	f.Add([]byte{199, 199, 199, 201, 199, 199}, []byte{0x10, 0x10, 0xff})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{0x00, 0x00, 0x01, 0x80, 0x00, 0x04})
	f.Fuzz(func(t *testing.T, ops, damage []byte) {
		if len(ops) > 200 {
			return
		}
		b, region := openFake(t, 2048, int64(len(damage)))
		history := map[cache.Seq][]byte{}
		for i, op := range ops {
			if op >= 200 {
				if last := b.Stats().Last; last > cache.Seq(op-200) {
					if err := b.Release(last - cache.Seq(op-200)); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			p := payloadFor(cache.Seq(i), int(op)*4) // at most 796 of 984 bytes
			history[appendMakingRoom(t, b, cache.Kind(op), p)] = p
		}
		image := region.Crash()
		for i := 0; i+2 < len(damage); i += 3 {
			off := int(binary.LittleEndian.Uint16(damage[i:])) % len(image)
			image[off] ^= damage[i+2]
		}
		b, err := cache.Open(pmem.NewFakeImage(image, 1), cache.Options{})
		if err != nil {
			if !errors.Is(err, cache.ErrCorrupt) {
				t.Fatalf("Open refused with %v, want ErrCorrupt", err)
			}
			return
		}
		got := replayAll(t, b)
		for i, r := range got {
			if p, ok := history[r.Seq]; !ok || string(p) != string(r.Payload) || (i > 0 && r.Seq != got[i-1].Seq+1) {
				t.Fatalf("recovered %v, which the workload did not append there", r)
			}
		}
	})
}

func TestFuzzSeedsOpen(t *testing.T) {
	for i, image := range fuzzImages(t) {
		if !bytes.Equal(fuzzImage(fuzzInput(image)), image) {
			t.Fatalf("seed image %d does not survive the fuzz input encoding", i)
		}
		b, err := cache.Open(pmem.NewFakeImage(image, 1), cache.Options{})
		if err != nil {
			t.Fatalf("seed image %d: %v", i, err)
		}
		b.Close()
	}
}
