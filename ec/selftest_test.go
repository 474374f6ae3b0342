package ec

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSelfTestPassesWithEveryOptionSet: the known answers hold for every
// instruction-set level and with concurrency, so no SIMD path on this CPU
// disagrees with the portable code.
func TestSelfTestPassesWithEveryOptionSet(t *testing.T) {
	for _, o := range optionMatrix() {
		t.Run(o.name, func(t *testing.T) {
			if err := SelfTest(o.options...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSelfTestDetectsAWrongKnownAnswer: a table with one wrong constant, a
// missing constant, or a geometry the codec refuses makes the self-test fail
// with ErrSelfTest, and names the geometry.
func TestSelfTestDetectsAWrongKnownAnswer(t *testing.T) {
	wrongSum := cloneKnownAnswers()
	wrongSum[2].paritySums[1] ^= 1
	shortSums := cloneKnownAnswers()
	shortSums[4].paritySums = shortSums[4].paritySums[:2]
	badGeometry := cloneKnownAnswers()
	badGeometry[0].geometry.ChunkSize = 1000
	tests := []struct {
		name     string
		table    []knownAnswer
		geometry string
	}{
		{"wrong parity checksum", wrongSum, "4+2x16KiB"},
		{"missing parity checksum", shortSums, "8+3x16KiB"},
		{"invalid geometry", badGeometry, "2+1x1000B"},
	}
	for _, tt := range tests {
		err := checkKnownAnswers(tt.table)
		if !errors.Is(err, ErrSelfTest) || !strings.Contains(err.Error(), tt.geometry) {
			t.Errorf("%s: error %v, want ErrSelfTest naming %s", tt.name, err, tt.geometry)
		}
	}
	if err := checkKnownAnswers(cloneKnownAnswers()); err != nil {
		t.Fatalf("the unmodified clone fails: %v", err)
	}
}

func cloneKnownAnswers() []knownAnswer {
	table := make([]knownAnswer, len(knownAnswers))
	for i, a := range knownAnswers {
		table[i] = knownAnswer{a.geometry, append([]uint32(nil), a.paritySums...)}
	}
	return table
}

// TestPrintKnownAnswers regenerates the knownAnswers table with portable
// code. It only prints, and only when BASALT_EC_PRINT_KNOWN_ANSWERS is set:
// the constants are the on-drive format and are changed deliberately or not
// at all.
func TestPrintKnownAnswers(t *testing.T) {
	if os.Getenv("BASALT_EC_PRINT_KNOWN_ANSWERS") == "" {
		t.Skip("set BASALT_EC_PRINT_KNOWN_ANSWERS=1 to print the known-answer table")
	}
	var out strings.Builder
	for _, a := range knownAnswers {
		g := a.geometry
		c, err := New(g, WithSIMD(SIMDNone))
		if err != nil {
			t.Fatal(err)
		}
		stripe := c.AllocStripe()
		knownAnswerData(stripe, g)
		if err := c.Encode(stripe); err != nil {
			t.Fatal(err)
		}
		var sums []string
		for _, parity := range stripe[g.Data:] {
			sums = append(sums, fmt.Sprintf("%#08x", Checksum(parity)))
		}
		fmt.Fprintf(&out, "\t{Geometry{Data: %d, Parity: %d, ChunkSize: knownAnswerChunkSize}, []uint32{%s}},\n",
			g.Data, g.Parity, strings.Join(sums, ", "))
	}
	t.Log("\n" + out.String())
}
