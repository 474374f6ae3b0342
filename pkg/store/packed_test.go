package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"basalt/pkg/compress"
	"basalt/pkg/meta"
)

// textBlock returns one block of generated English-like text.
func textBlock(r *rand.Rand) []byte {
	words := []string{"stripe", "segment", "summary", "the", "drive", "parity", "block", "map",
		"of", "and", "cleaner", "writes", "reads", "recovery", "a", "volume"}
	var b bytes.Buffer
	for b.Len() < BlockSize {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:BlockSize]
}

// buildPacked packs up to maxFragments compressed text blocks into a slot
// and returns it with the blocks.
func buildPacked(t testing.TB, r *rand.Rand) ([]byte, [][]byte) {
	c := compress.NewCompressor()
	slot := make([]byte, BlockSize)
	var h packedHeader
	var blocks [][]byte
	comp := make([]byte, maxFragmentBytes)
	for i := range maxFragments {
		b := textBlock(r)
		alg := compress.Algorithm(1 + i%2)
		n, ok, err := c.Compress(alg, comp, b)
		if err != nil || !ok {
			t.Fatalf("compress: ok %v, %v", ok, err)
		}
		if !h.fits(n) {
			break
		}
		h.add(slot, fragment{lba: uint64(100 + i), vol: 7, sum: blockSum(b), alg: alg}, comp[:n])
		blocks = append(blocks, b)
	}
	return slot, blocks
}

func TestPackedSlotRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	slot, blocks := buildPacked(t, r)
	if len(blocks) < 2 {
		t.Fatalf("only %d text blocks fit one slot", len(blocks))
	}
	var h packedHeader
	if err := parsePackedHeader(slot, &h); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, BlockSize)
	for i, b := range blocks {
		k := h.find(7, uint64(100+i))
		if k != i {
			t.Fatalf("find(lba %d) = %d", 100+i, k)
		}
		if err := unpackFragment(slot, &h, k, dst); err != nil || !bytes.Equal(dst, b) {
			t.Fatalf("fragment %d: %v", i, err)
		}
	}
	if h.find(7, 99) != -1 || h.find(8, 100) != -1 {
		t.Fatal("find returned a fragment of another block")
	}
	// Any flipped byte is caught: by the header checksum, a fragment's
	// checksum, or the decompressed block's.
	for range 200 {
		bad := bytes.Clone(slot)
		bad[r.IntN(BlockSize)] ^= byte(1 + r.IntN(255))
		if bytes.Equal(bad, slot) {
			continue
		}
		var hb packedHeader
		if err := parsePackedHeader(bad, &hb); err != nil {
			if !errors.Is(err, ErrBadPackedSlot) {
				t.Fatalf("parse: %v, want ErrBadPackedSlot", err)
			}
			continue
		}
		for i := range hb.n {
			if err := unpackFragment(bad, &hb, i, dst); err == nil && !bytes.Equal(dst, blocks[i]) {
				t.Fatalf("a corrupted slot decompressed fragment %d to wrong data", i)
			}
		}
	}
}

func FuzzPackedHeader(f *testing.F) {
	slot, _ := buildPacked(f, rand.New(rand.NewPCG(1, 2)))
	f.Add(slot, false)
	f.Add(slot, true)
	f.Add(make([]byte, BlockSize), true)
	f.Fuzz(func(t *testing.T, b []byte, resum bool) {
		slot := make([]byte, BlockSize)
		copy(slot, b)
		if n := int(slot[5]); resum && n <= maxFragments {
			// A valid header checksum over mutated descriptors: the
			// parser's bounds checks and the decompressors get to work.
			binary.LittleEndian.PutUint32(slot[8:], packedHeaderSum(slot, n))
		}
		var h packedHeader
		if err := parsePackedHeader(slot, &h); err != nil {
			if !errors.Is(err, ErrBadPackedSlot) {
				t.Fatalf("%v does not wrap ErrBadPackedSlot", err)
			}
			return
		}
		dst := make([]byte, BlockSize)
		for i := range h.n {
			if err := unpackFragment(slot, &h, i, dst); err != nil && !errors.Is(err, ErrBadPackedSlot) {
				t.Fatalf("%v does not wrap ErrBadPackedSlot", err)
			}
		}
		_ = h.find(meta.VolumeID(1), 0)
	})
}
