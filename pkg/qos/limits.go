package qos

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is the class of a limit that cannot be set.
var ErrInvalid = errors.New("qos: invalid limit")

// MaxRate bounds a limit's Rate and Burst (2^50 tokens: a petabyte per
// second), so that the buckets' arithmetic in nanoseconds never overflows.
const MaxRate = 1 << 50

// Limit is one token bucket: Rate tokens per second (commands for an IOPS
// limit, bytes for a bandwidth limit) and a bucket of Burst tokens. The
// zero Limit is no limit.
type Limit struct {
	// Rate is the sustained rate, per second; 0: unlimited.
	Rate uint64 `json:"rate,omitempty"`
	// Burst is how many tokens the bucket holds when the volume has been
	// idle; 0: Rate (one second's worth). It must be 0 without a Rate.
	Burst uint64 `json:"burst,omitempty"`
}

// Unlimited reports whether the limit lets everything through.
func (l Limit) Unlimited() bool { return l.Rate == 0 }

// EffectiveBurst returns the bucket's depth: Burst, or Rate when Burst is 0.
func (l Limit) EffectiveBurst() uint64 {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// Limits are a volume's limits. Each applies to its own bucket; a read
// takes tokens from IOPS, ReadIOPS, Bytes and ReadBytes, a write from
// IOPS, WriteIOPS, Bytes and WriteBytes. The zero Limits limit nothing.
type Limits struct {
	IOPS       Limit `json:"iops,omitzero"`
	ReadIOPS   Limit `json:"read_iops,omitzero"`
	WriteIOPS  Limit `json:"write_iops,omitzero"`
	Bytes      Limit `json:"bytes_per_second,omitzero"`
	ReadBytes  Limit `json:"read_bytes_per_second,omitzero"`
	WriteBytes Limit `json:"write_bytes_per_second,omitzero"`
}

// kind indexes a throttle's buckets, in the order of Limits' fields.
type kind uint8

const (
	kindIOPS kind = iota
	kindReadIOPS
	kindWriteIOPS
	kindBytes
	kindReadBytes
	kindWriteBytes
	numKinds
)

var kindNames = [numKinds]string{"iops", "read_iops", "write_iops", "bytes_per_second",
	"read_bytes_per_second", "write_bytes_per_second"}

// all returns the limits indexed by kind.
func (l *Limits) all() [numKinds]*Limit {
	return [numKinds]*Limit{&l.IOPS, &l.ReadIOPS, &l.WriteIOPS, &l.Bytes, &l.ReadBytes, &l.WriteBytes}
}

// IsZero reports whether the limits limit nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Validate checks every limit: Rate and Burst at most MaxRate, no Burst
// without a Rate. The error wraps ErrInvalid and names the field.
func (l Limits) Validate() error {
	for k, lim := range l.all() {
		switch {
		case lim.Rate > MaxRate || lim.Burst > MaxRate:
			return fmt.Errorf("%w: %s: rate %d burst %d: at most %d", ErrInvalid, kindNames[k], lim.Rate, lim.Burst, uint64(MaxRate))
		case lim.Rate == 0 && lim.Burst != 0:
			return fmt.Errorf("%w: %s: a burst of %d without a rate", ErrInvalid, kindNames[k], lim.Burst)
		}
	}
	return nil
}

// String lists the limits set, "iops=20000 bytes_per_second=400000000", or
// "unlimited". A burst other than the default follows its rate:
// "iops=1000/2000".
func (l Limits) String() string {
	var parts []string
	for k, lim := range l.all() {
		if lim.Unlimited() {
			continue
		}
		s := fmt.Sprintf("%s=%d", kindNames[k], lim.Rate)
		if lim.Burst != 0 {
			s += fmt.Sprintf("/%d", lim.Burst)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, " ")
}

// Dir is a command's direction.
type Dir uint8

// The directions. Trim and write-zeroes are writes.
const (
	Read Dir = iota
	Write
	NumDirs
)

// String returns "read" or "write", the metrics' direction label.
func (d Dir) String() string {
	switch d {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}
