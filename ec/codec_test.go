package ec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"
)

func mustCodec(tb testing.TB, g Geometry, opts ...Option) *Codec {
	tb.Helper()
	c, err := New(g, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// encodedStripe returns an encoded stripe of random data and its checksums.
func encodedStripe(tb testing.TB, c *Codec, seed uint64) ([][]byte, []uint32) {
	tb.Helper()
	stripe := c.AllocStripe()
	r := rand.New(rand.NewPCG(seed, 1))
	for _, chunk := range stripe[:c.geometry.Data] {
		for i := 0; i < len(chunk); i += 8 {
			binary.LittleEndian.PutUint64(chunk[i:], r.Uint64())
		}
	}
	if err := c.Encode(stripe); err != nil {
		tb.Fatal(err)
	}
	sums := make([]uint32, c.geometry.Width())
	if err := c.ChecksumStripe(stripe, sums); err != nil {
		tb.Fatal(err)
	}
	return stripe, sums
}

func copyStripe(stripe [][]byte) [][]byte {
	out := make([][]byte, len(stripe))
	for i, chunk := range stripe {
		out[i] = append([]byte(nil), chunk...)
	}
	return out
}

func isAligned(p []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))%ChunkAlignment == 0
}

var testGeometries = []Geometry{
	{Data: 1, Parity: 0, ChunkSize: 4096},
	{Data: 1, Parity: 1, ChunkSize: 4096},
	{Data: 2, Parity: 1, ChunkSize: 8192},
	{Data: 4, Parity: 1, ChunkSize: 64 << 10},
	{Data: 4, Parity: 2, ChunkSize: 64 << 10},
	{Data: 8, Parity: 3, ChunkSize: 16 << 10},
	{Data: 10, Parity: 4, ChunkSize: 4096},
}

// TestReconstructRestoresAnyErasureUpToParity encodes random data for each
// geometry and option set, then, for random sets of up to Parity chunks that
// are erased or corrupted, checks that Reconstruct restores the whole stripe
// and ReconstructData the data chunks.
func TestReconstructRestoresAnyErasureUpToParity(t *testing.T) {
	for _, o := range optionMatrix() {
		for _, g := range testGeometries {
			t.Run(o.name+"/"+g.String(), func(t *testing.T) {
				c := mustCodec(t, g, o.options...)
				original, sums := encodedStripe(t, c, uint64(g.Width()))
				if bad, err := c.Verify(original, sums); bad != nil || err != nil {
					t.Fatalf("fresh stripe: bad %v, %v", bad, err)
				}
				r := rand.New(rand.NewPCG(uint64(g.Data), uint64(g.Parity)))
				for trial := range 8 {
					lost := r.Perm(g.Width())[:r.IntN(g.Parity+1)]
					checkReconstruction(t, c, original, sums, lost, trial)
				}
			})
		}
	}
}

func checkReconstruction(t *testing.T, c *Codec, original [][]byte, sums []uint32, lost []int, trial int) {
	t.Helper()
	for _, dataOnly := range []bool{false, true} {
		work := copyStripe(original)
		for k, i := range lost {
			if k%2 == 0 {
				work[i] = nil
			} else {
				work[i][trial%len(work[i])] ^= 0x80
			}
		}
		reconstruct := c.Reconstruct
		if dataOnly {
			reconstruct = c.ReconstructData
		}
		if err := reconstruct(work, sums); err != nil {
			t.Fatalf("lost %v, data only %v: %v", lost, dataOnly, err)
		}
		for i := range work {
			if dataOnly && i >= c.geometry.Data && len(work[i]) == 0 {
				continue
			}
			if !bytes.Equal(work[i], original[i]) {
				t.Fatalf("lost %v, data only %v: chunk %d differs", lost, dataOnly, i)
			}
		}
	}
}

// TestParityOneIsTheXOROfTheData checks the one-parity format against an
// oracle that does not use reedsolomon.
func TestParityOneIsTheXOROfTheData(t *testing.T) {
	for _, data := range []int{1, 2, 3, 7} {
		c := mustCodec(t, Geometry{Data: data, Parity: 1, ChunkSize: 4096})
		stripe, _ := encodedStripe(t, c, 3)
		want := make([]byte, 4096)
		for _, chunk := range stripe[:data] {
			for i := range want {
				want[i] ^= chunk[i]
			}
		}
		if !bytes.Equal(stripe[data], want) {
			t.Fatalf("%d+1: parity is not the XOR of the data", data)
		}
	}
}

// TestEncodeIsIdenticalAcrossOptions is metamorphic: every option set must
// produce the parity that portable code produces, for several chunk sizes.
func TestEncodeIsIdenticalAcrossOptions(t *testing.T) {
	for _, g := range []Geometry{
		{Data: 4, Parity: 2, ChunkSize: 4096},
		{Data: 6, Parity: 3, ChunkSize: 256 << 10},
		{Data: 12, Parity: 4, ChunkSize: 32 << 10},
	} {
		reference, _ := encodedStripe(t, mustCodec(t, g, WithSIMD(SIMDNone)), 9)
		for _, o := range optionMatrix() {
			stripe, _ := encodedStripe(t, mustCodec(t, g, o.options...), 9)
			for i := g.Data; i < g.Width(); i++ {
				if !bytes.Equal(stripe[i], reference[i]) {
					t.Fatalf("%v %s: parity chunk %d differs from portable code", g, o.name, i)
				}
			}
		}
	}
}

func TestReconstructRepairsInPlaceOrIntoAlignedBuffers(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 8192})
	original, sums := encodedStripe(t, c, 4)
	work := c.AllocStripe()
	restore(work, original)
	corrupted := unsafe.SliceData(work[1])
	work[1][5] ^= 1
	work[4] = nil
	if err := c.Reconstruct(work, sums); err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(work[1]) != corrupted {
		t.Fatal("corrupted chunk was not repaired in its own buffer")
	}
	if !isAligned(work[4]) || len(work[4]) != 8192 {
		t.Fatal("rebuilt nil chunk is not an aligned ChunkSize buffer")
	}
	for i := range work {
		if !bytes.Equal(work[i], original[i]) {
			t.Fatalf("chunk %d differs", i)
		}
	}
}

func TestReconstructBeyondParityFailsAndChangesNothing(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	original, sums := encodedStripe(t, c, 5)
	work := copyStripe(original)
	work[0] = nil
	work[2][0] ^= 1
	work[5][9] ^= 1
	before := copyStripe(work)
	for _, reconstruct := range []func([][]byte, []uint32) error{c.Reconstruct, c.ReconstructData} {
		err := reconstruct(work, sums)
		if !errors.Is(err, ErrTooManyMissing) {
			t.Fatalf("error %v, want ErrTooManyMissing", err)
		}
		for i := range work {
			if !bytes.Equal(work[i], before[i]) || (work[i] == nil) != (before[i] == nil) {
				t.Fatalf("chunk %d changed by a failed reconstruction", i)
			}
		}
	}
}

// A wrong checksum for a lost chunk means the rebuilt data cannot be trusted:
// Reconstruct reports corruption and leaves the chunk missing.
func TestReconstructWithWrongChecksumNeverReturnsWrongData(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	original, sums := encodedStripe(t, c, 6)
	work := copyStripe(original)
	work[3] = nil
	sums[3] ^= 1
	if err := c.Reconstruct(work, sums); !errors.Is(err, ErrCorruption) {
		t.Fatalf("error %v, want ErrCorruption", err)
	}
	if len(work[3]) != 0 {
		t.Fatal("chunk that failed its checksum after rebuild was returned")
	}
}

func TestReconstructDataMarksBadParityMissing(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	original, sums := encodedStripe(t, c, 7)
	work := copyStripe(original)
	work[1] = nil
	work[5][0] ^= 1
	if err := c.ReconstructData(work, sums); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(work[1], original[1]) {
		t.Fatal("data chunk not rebuilt")
	}
	if len(work[5]) != 0 {
		t.Fatal("bad parity chunk was not marked missing")
	}
	if !bytes.Equal(work[4], original[4]) {
		t.Fatal("good parity chunk changed")
	}
}

func TestVerifyReportsBadChunksAndParityMismatch(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	original, sums := encodedStripe(t, c, 8)
	work := copyStripe(original)
	work[0] = work[0][:0]
	work[3][100] ^= 4
	bad, err := c.Verify(work, sums)
	if err != nil || fmt.Sprint(bad) != "[0 3]" {
		t.Fatalf("Verify = %v, %v; want [0 3], nil", bad, err)
	}
	// Data changed after encoding, with the checksums recomputed: every chunk
	// passes its checksum, but parity no longer matches.
	work = copyStripe(original)
	work[2][0] ^= 1
	fresh := make([]uint32, len(sums))
	if err := c.ChecksumStripe(work, fresh); err != nil {
		t.Fatal(err)
	}
	if bad, err := c.Verify(work, fresh); !errors.Is(err, ErrCorruption) || bad != nil {
		t.Fatalf("Verify = %v, %v; want ErrCorruption", bad, err)
	}
}

func TestInvalidStripesAreRejected(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 2, Parity: 1, ChunkSize: 4096})
	good := c.AllocStripe()
	sums := make([]uint32, 3)
	tests := []struct {
		name string
		run  func() error
	}{
		{"encode with too few chunks", func() error { return c.Encode(good[:2]) }},
		{"encode with a short chunk", func() error { return c.Encode([][]byte{good[0], good[1][:100], good[2]}) }},
		{"encode with a missing data chunk", func() error { return c.Encode([][]byte{nil, good[1], good[2]}) }},
		{"encode with a missing parity chunk", func() error { return c.Encode([][]byte{good[0], good[1], nil}) }},
		{"verify with too few sums", func() error { _, err := c.Verify(good, sums[:2]); return err }},
		{"reconstruct with no sums", func() error { return c.Reconstruct(good, nil) }},
		{"reconstruct with a long chunk", func() error {
			return c.Reconstruct([][]byte{good[0], make([]byte, 8192), good[2]}, sums)
		}},
		{"checksum with a missing chunk", func() error { return c.ChecksumStripe([][]byte{good[0], nil, good[2]}, sums) }},
	}
	for _, tt := range tests {
		if err := tt.run(); !errors.Is(err, ErrInvalidStripe) {
			t.Errorf("%s: error %v, want ErrInvalidStripe", tt.name, err)
		}
	}
}

func TestNewRejectsInvalidGeometryAndOptions(t *testing.T) {
	if _, err := New(Geometry{Data: 0, Parity: 1, ChunkSize: 4096}); !errors.Is(err, ErrInvalidGeometry) {
		t.Fatalf("zero data: %v", err)
	}
	g := Geometry{Data: 2, Parity: 1, ChunkSize: 4096}
	for _, opt := range []Option{WithConcurrency(0), WithSIMD(SIMD(99))} {
		if _, err := New(g, opt); err == nil {
			t.Fatal("invalid option accepted")
		}
	}
}

func TestAllocStripeChunksAreAlignedAndSeparate(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 3, Parity: 2, ChunkSize: 12288})
	stripe := c.AllocStripe()
	for i, chunk := range stripe {
		if len(chunk) != 12288 || cap(chunk) != 12288 || !isAligned(chunk) {
			t.Fatalf("chunk %d: len %d cap %d aligned %v", i, len(chunk), cap(chunk), isAligned(chunk))
		}
	}
	_ = append(stripe[0], 1) // must reallocate, not spill into chunk 1
	if stripe[1][0] != 0 {
		t.Fatal("append to chunk 0 wrote into chunk 1")
	}
}

// TestCodecIsSafeForConcurrentUse runs encodes and reconstructions of
// separate stripes on one codec at once; it matters under -race.
func TestCodecIsSafeForConcurrentUse(t *testing.T) {
	c := mustCodec(t, Geometry{Data: 4, Parity: 2, ChunkSize: 16 << 10}, WithConcurrency(2))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			original, sums := encodedStripe(t, c, uint64(w))
			for i := range 6 {
				work := copyStripe(original)
				work[i] = nil
				work[(i+1)%6] = nil
				if err := c.Reconstruct(work, sums); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
