package compress

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// text returns n bytes of generated English-like text.
func text(r *rand.Rand, n int) []byte {
	words := strings.Fields("the block store writes stripes of erasure coded data to every drive " +
		"and reads them back after a crash with the summary of each segment replayed in order")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

func TestRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	c := NewCompressor()
	for _, a := range []Algorithm{LZ4, Zstd} {
		src := text(r, 4096)
		dst := make([]byte, 4096)
		n, ok, err := c.Compress(a, dst, src)
		if err != nil || !ok || n >= 2048 {
			t.Fatalf("%v: text compressed to %d, ok %v, err %v", a, n, ok, err)
		}
		out := make([]byte, 4096)
		if err := Decompress(a, out, dst[:n]); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("%v: round trip: %v", a, err)
		}
		random := make([]byte, 4096)
		for i := range random {
			random[i] = byte(r.Uint32())
		}
		if _, ok, err := c.Compress(a, dst[:3072], random); ok || err != nil {
			t.Fatalf("%v: random data compressed into 3072 bytes (err %v)", a, err)
		}
		short := make([]byte, 4095)
		if err := Decompress(a, short, dst[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v: decompressing into a short buffer: %v, want ErrCorrupt", a, err)
		}
		if err := Decompress(a, out, random[:100]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v: decompressing garbage: %v, want ErrCorrupt", a, err)
		}
	}
	if _, ok, _ := c.Compress(None, make([]byte, 4096), text(r, 4096)); ok {
		t.Fatal("None compressed")
	}
	if _, err := ParseAlgorithm("gzip"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("ParseAlgorithm(gzip) = %v", err)
	}
	for _, a := range []Algorithm{None, LZ4, Zstd} {
		if b, err := ParseAlgorithm(a.String()); err != nil || b != a {
			t.Fatalf("ParseAlgorithm(%v) = %v, %v", a, b, err)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops its items under the race detector")
	}
	r := rand.New(rand.NewPCG(1, 2))
	c := NewCompressor()
	src, dst, out := text(r, 4096), make([]byte, 4096), make([]byte, 4096)
	for _, a := range []Algorithm{LZ4, Zstd} {
		n, _, _ := c.Compress(a, dst, src)
		comp := append([]byte(nil), dst[:n]...)
		allocs := testing.AllocsPerRun(100, func() {
			if _, _, err := c.Compress(a, dst, src); err != nil {
				t.Fatal(err)
			}
			if err := Decompress(a, out, comp); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 0 {
			t.Errorf("%v: %.1f allocations per compress+decompress", a, allocs)
		}
	}
}

func FuzzDecompress(f *testing.F) {
	c := NewCompressor()
	dst := make([]byte, 4096)
	n, _, _ := c.Compress(LZ4, dst, text(rand.New(rand.NewPCG(3, 4)), 4096))
	f.Add(uint8(LZ4), dst[:n])
	n, _, _ = c.Compress(Zstd, dst, text(rand.New(rand.NewPCG(3, 4)), 4096))
	f.Add(uint8(Zstd), dst[:n])
	f.Fuzz(func(t *testing.T, a uint8, src []byte) {
		out := make([]byte, 4096)
		if err := Decompress(Algorithm(a%3), out, src); err == nil && Algorithm(a%3) == None {
			t.Fatal("None decompressed")
		}
	})
}
