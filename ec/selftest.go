package ec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// knownAnswer pins the parity of one geometry: the CRC32C of each parity
// chunk computed from knownAnswerData. The values were generated once, with
// portable Go (SIMDNone), by TestPrintKnownAnswers, and must never change:
// they are the on-drive format.
type knownAnswer struct {
	geometry   Geometry
	paritySums []uint32
}

// knownAnswerChunkSize is small, to keep start-up fast, yet several times
// every vector width, so the vector loops run many iterations.
const knownAnswerChunkSize = 16 << 10

var knownAnswers = []knownAnswer{
	{Geometry{Data: 2, Parity: 1, ChunkSize: knownAnswerChunkSize}, []uint32{0x19f34281}},
	{Geometry{Data: 3, Parity: 1, ChunkSize: knownAnswerChunkSize}, []uint32{0xce72b255}},
	{Geometry{Data: 4, Parity: 2, ChunkSize: knownAnswerChunkSize}, []uint32{0xa37fe3e4, 0x1269e045}},
	{Geometry{Data: 6, Parity: 2, ChunkSize: knownAnswerChunkSize}, []uint32{0x28508efe, 0xf51008d7}},
	{Geometry{Data: 8, Parity: 3, ChunkSize: knownAnswerChunkSize}, []uint32{0x602c1091, 0xe1593f8f, 0x30d7ef62}},
}

// SelfTest is the known-answer test the node runs at start-up, with the
// options it will serve with. For each pinned geometry it encodes
// deterministic data and compares the parity with the constants in this file,
// verifies the stripe, then erases chunks in several patterns and checks that
// reconstruction restores every byte, and that one erasure too many is
// refused. Any mismatch returns an error wrapping ErrSelfTest, and the node
// must refuse to serve: vector code paths differ by CPU, and silently wrong
// parity is the worst failure a storage system can have.
func SelfTest(opts ...Option) error {
	return checkKnownAnswers(knownAnswers, opts...)
}

func checkKnownAnswers(table []knownAnswer, opts ...Option) error {
	for _, answer := range table {
		if err := checkKnownAnswer(answer, opts); err != nil {
			return fmt.Errorf("%w: geometry %v: %w", ErrSelfTest, answer.geometry, err)
		}
	}
	return nil
}

func checkKnownAnswer(answer knownAnswer, opts []Option) error {
	g := answer.geometry
	if len(answer.paritySums) != g.Parity {
		return fmt.Errorf("%d known parity sums for %d parity chunks", len(answer.paritySums), g.Parity)
	}
	c, err := New(g, opts...)
	if err != nil {
		return err
	}
	original := c.AllocStripe()
	knownAnswerData(original, g)
	for _, parity := range original[g.Data:] {
		for i := range parity {
			parity[i] = 0xa5 // Encode must overwrite whatever was there
		}
	}
	if err := c.Encode(original); err != nil {
		return err
	}
	for j, want := range answer.paritySums {
		if got := Checksum(original[g.Data+j]); got != want {
			return fmt.Errorf("parity chunk %d has checksum %#08x, known answer %#08x", j, got, want)
		}
	}
	sums := make([]uint32, g.Width())
	if err := c.ChecksumStripe(original, sums); err != nil {
		return err
	}
	if bad, err := c.Verify(original, sums); err != nil || bad != nil {
		return fmt.Errorf("verify of the encoded stripe: bad chunks %v, %v", bad, err)
	}
	return checkErasures(c, original, sums)
}

// checkErasures erases chunks of a copy of original in each pattern of
// erasurePatterns and checks that reconstruction restores it exactly.
func checkErasures(c *Codec, original [][]byte, sums []uint32) error {
	g := c.geometry
	work := c.AllocStripe()
	for _, pattern := range erasurePatterns(g) {
		for _, dataOnly := range []bool{false, true} {
			restore(work, original)
			for _, i := range pattern.erased {
				work[i] = work[i][:0]
			}
			for _, i := range pattern.corrupted {
				work[i][len(work[i])/2] ^= 0x01
			}
			err := c.reconstruct(work, sums, dataOnly)
			tooMany := len(pattern.erased)+len(pattern.corrupted) > g.Parity
			if tooMany {
				if !errors.Is(err, ErrTooManyMissing) {
					return fmt.Errorf("%s: %d chunks lost, want ErrTooManyMissing, got %v",
						pattern.name, g.Parity+1, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("%s (data only %v): %w", pattern.name, dataOnly, err)
			}
			last := g.Width()
			if dataOnly {
				last = g.Data
			}
			for i := range last {
				if !bytes.Equal(work[i], original[i]) {
					return fmt.Errorf("%s (data only %v): chunk %d differs after reconstruction",
						pattern.name, dataOnly, i)
				}
			}
		}
	}
	return nil
}

// restore makes work a copy of original, re-extending truncated chunks.
func restore(work, original [][]byte) {
	for i := range work {
		work[i] = work[i][:cap(work[i])]
		copy(work[i], original[i])
	}
}

type erasurePattern struct {
	name      string
	erased    []int // chunks set to length 0
	corrupted []int // chunks with one bit flipped
}

// erasurePatterns lists every single erasure, the first and the last Parity
// chunks (all parity: parity recomputed by reconstruction; leading data:
// data solved from parity), one corrupted chunk next to an erased one, and
// Parity+1 erasures, which must be refused.
func erasurePatterns(g Geometry) []erasurePattern {
	var patterns []erasurePattern
	for i := range g.Width() {
		patterns = append(patterns, erasurePattern{name: fmt.Sprintf("chunk %d erased", i), erased: []int{i}})
	}
	var first, last []int
	for i := range g.Parity {
		first = append(first, i)
		last = append(last, g.Data+i)
	}
	patterns = append(patterns,
		erasurePattern{name: "first parity-count chunks erased", erased: first},
		erasurePattern{name: "all parity erased", erased: last},
		erasurePattern{name: "one more than parity erased", erased: append(first[:len(first):len(first)], g.Parity)},
	)
	if g.Parity >= 2 {
		patterns = append(patterns, erasurePattern{name: "one erased, one corrupted",
			erased: []int{g.Width() - 1}, corrupted: []int{0}})
	}
	return patterns
}

// knownAnswerData fills the data chunks of stripe from a splitmix64 sequence
// seeded by the geometry, so every geometry encodes different bytes and the
// bytes never depend on a library's random generator.
func knownAnswerData(stripe [][]byte, g Geometry) {
	state := uint64(g.Data)<<32 | uint64(g.Parity)<<16 | 0x5eed
	for _, chunk := range stripe[:g.Data] {
		for i := 0; i < len(chunk); i += 8 {
			state += 0x9e3779b97f4a7c15
			z := state
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			binary.LittleEndian.PutUint64(chunk[i:], z^z>>31)
		}
	}
}
