package ec

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzReconstructNeverReturnsWrongData erases and corrupts chunks of a 4+2
// stripe as the fuzzer chooses. With at most Parity chunks lost the stripe
// must come back exactly; with more, Reconstruct must fail with
// ErrTooManyMissing and leave the stripe as it was. No input may produce a
// success with wrong bytes.
func FuzzReconstructNeverReturnsWrongData(f *testing.F) {
	f.Add(uint64(1), uint8(0b000001), uint8(0), uint16(0), byte(1))
	f.Add(uint64(2), uint8(0b100000), uint8(0b000001), uint16(4095), byte(0x80))
	f.Add(uint64(3), uint8(0b000111), uint8(0), uint16(7), byte(1))
	f.Add(uint64(4), uint8(0), uint8(0b110000), uint16(100), byte(0xff))
	c := mustCodec(f, Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	f.Fuzz(func(t *testing.T, seed uint64, erased, corrupted uint8, at uint16, flip byte) {
		original, sums := encodedStripe(t, c, seed)
		work := copyStripe(original)
		lost := 0
		for i := range 6 {
			switch {
			case erased&(1<<i) != 0:
				work[i] = nil
				lost++
			case corrupted&(1<<i) != 0 && flip != 0:
				work[i][int(at)%4096] ^= flip
				lost++
			}
		}
		before := copyStripe(work)
		err := c.Reconstruct(work, sums)
		if lost > 2 {
			if !errors.Is(err, ErrTooManyMissing) {
				t.Fatalf("%d chunks lost: error %v, want ErrTooManyMissing", lost, err)
			}
			for i := range work {
				if !bytes.Equal(work[i], before[i]) {
					t.Fatalf("failed reconstruction changed chunk %d", i)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("%d chunks lost: %v", lost, err)
		}
		for i := range work {
			if !bytes.Equal(work[i], original[i]) {
				t.Fatalf("chunk %d differs after reconstruction", i)
			}
		}
	})
}
