package ec

import (
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// SIMD selects the instruction sets the codec may use. Every level computes
// the same bytes; the levels exist so tests and the self-test can check the
// vector code against the portable code, and so an operator can step down
// from a misbehaving instruction set.
type SIMD uint8

const (
	// SIMDAuto uses the best instruction set the CPU has (the default).
	SIMDAuto SIMD = iota
	// SIMDAVX2 caps x86 at AVX2: no AVX-512, no GFNI.
	SIMDAVX2
	// SIMDSSSE3 caps x86 at SSSE3: no AVX2 either.
	SIMDSSSE3
	// SIMDNone uses portable Go only, on every architecture.
	SIMDNone
)

// SIMDLevels lists every level, best first.
var SIMDLevels = []SIMD{SIMDAuto, SIMDAVX2, SIMDSSSE3, SIMDNone}

func (s SIMD) String() string {
	switch s {
	case SIMDAuto:
		return "auto"
	case SIMDAVX2:
		return "avx2"
	case SIMDSSSE3:
		return "ssse3"
	case SIMDNone:
		return "none"
	}
	return fmt.Sprintf("SIMD(%d)", uint8(s))
}

// Option configures a Codec. Options change speed, never the bytes computed.
type Option func(*options)

type options struct {
	simd        SIMD
	concurrency int
}

func defaultOptions() options { return options{simd: SIMDAuto, concurrency: 1} }

// WithSIMD limits the instruction sets the codec uses.
func WithSIMD(level SIMD) Option { return func(o *options) { o.simd = level } }

// WithConcurrency lets one Encode or Reconstruct call split its work over up
// to n goroutines (default 1). Parallelism across stripes, one stripe per
// goroutine, usually serves a storage node better, and n = 1 keeps Encode
// free of allocations.
func WithConcurrency(n int) Option { return func(o *options) { o.concurrency = n } }

func (o *options) validate() error {
	if o.simd > SIMDNone {
		return fmt.Errorf("ec: unknown SIMD level %v", o.simd)
	}
	if o.concurrency < 1 {
		return fmt.Errorf("ec: concurrency %d < 1", o.concurrency)
	}
	return nil
}

// reedsolomonOptions translates o. The coding matrix is part of the on-drive
// format and therefore not an Option: reedsolomon's default matrix, except
// that one parity chunk is the XOR of the data (WithFastOneParityMatrix).
func (o *options) reedsolomonOptions() []reedsolomon.Option {
	opts := []reedsolomon.Option{
		reedsolomon.WithFastOneParityMatrix(),
		reedsolomon.WithMaxGoroutines(o.concurrency),
	}
	if o.simd >= SIMDAVX2 {
		opts = append(opts, reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false),
			reedsolomon.WithAVXGFNI(false))
	}
	if o.simd >= SIMDSSSE3 {
		opts = append(opts, reedsolomon.WithAVX2(false))
	}
	if o.simd >= SIMDNone {
		opts = append(opts, reedsolomon.WithSSSE3(false), reedsolomon.WithSSE2(false),
			reedsolomon.WithNEON(false), reedsolomon.WithSVE(false))
	}
	return opts
}
