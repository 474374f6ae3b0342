package bench

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Verifier holds what verified runs know about a region of a device: the
// generation last acknowledged for every 4 KiB unit, the next generation,
// the seed, and optionally the journal that makes this knowledge survive a
// crash. Runs that share a Verifier (prefill, then workloads) keep checking
// each other's data. Jobs touch disjoint units, so the table needs no lock.
type Verifier struct {
	Seed    uint64
	lbaSize int
	offset  int64
	size    int64
	acked   []uint64
	gen     atomic.Uint64
	journal *Journal
}

// NewVerifier covers [offset, offset+size) of a device with LBA size
// lbaSize, in memory only.
func NewVerifier(lbaSize int, offset, size int64, seed uint64) (*Verifier, error) {
	if lbaSize <= 0 || VerifyUnit%lbaSize != 0 || offset%VerifyUnit != 0 || size%VerifyUnit != 0 || size <= 0 {
		return nil, fmt.Errorf("%w: verify region [%d, +%d) with LBA size %d is not 4 KiB-aligned", ErrInvalidSpec, offset, size, lbaSize)
	}
	return &Verifier{Seed: seed, lbaSize: lbaSize, offset: offset, size: size, acked: make([]uint64, size/VerifyUnit)}, nil
}

// NewJournaledVerifier is NewVerifier whose acknowledgements are also
// recorded in a new journal at path.
func NewJournaledVerifier(path string, lbaSize int, offset, size int64, seed uint64) (*Verifier, error) {
	v, err := NewVerifier(lbaSize, offset, size, seed)
	if err != nil {
		return nil, err
	}
	v.journal, err = CreateJournal(path, JournalHeader{LBASize: uint32(lbaSize), Offset: offset, Size: size, Seed: seed})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ResumeVerifier continues the journal at path: it checks every unit the
// journal knows of on dev (as VerifyJournal does; any failure is returned
// with the report), takes what each unit holds as acknowledged, compacts the
// journal and reopens it for appending.
func ResumeVerifier(ctx context.Context, dev Device, path string) (*Verifier, *VerifyReport, error) {
	st, err := ReadJournal(path)
	if err != nil {
		return nil, nil, err
	}
	rep, found, err := checkJournal(ctx, dev, st)
	if err != nil {
		return nil, rep, err
	}
	if rep.Failed > 0 {
		return nil, rep, fmt.Errorf("%w: %d of %d units failed; first: %v", ErrVerify, rep.Failed, rep.Checked, rep.Errors[0])
	}
	if err := rewriteJournal(path, st.Header, found); err != nil {
		return nil, rep, err
	}
	st2, err := ReadJournal(path)
	if err != nil {
		return nil, rep, err
	}
	j, err := openJournalAppend(path, st2)
	if err != nil {
		return nil, rep, err
	}
	h := st.Header
	v := &Verifier{Seed: h.Seed, lbaSize: int(h.LBASize), offset: h.Offset, size: h.Size, acked: found, journal: j}
	v.gen.Store(st.MaxGen)
	return v, rep, nil
}

// covers reports whether the verifier's region holds [off, off+n).
func (v *Verifier) covers(lbaSize int, off, n int64) bool {
	return lbaSize == v.lbaSize && off >= v.offset && off+n <= v.offset+v.size
}

// Journal returns the verifier's journal, or nil.
func (v *Verifier) Journal() *Journal { return v.journal }

// Close closes the journal, if any.
func (v *Verifier) Close() error {
	if v.journal == nil {
		return nil
	}
	return v.journal.Close()
}

func (v *Verifier) unitOf(off int64) int { return int((off - v.offset) / VerifyUnit) }

func (v *Verifier) lbaOf(off int64) uint64 { return uint64(off) / uint64(v.lbaSize) }

// stamp prepares buf as the next generation for [off, off+len(buf)) and
// records the intent in the journal (not yet synced). It returns the
// generation.
func (v *Verifier) stamp(buf []byte, off int64) uint64 {
	gen := v.gen.Add(1)
	for i := 0; i < len(buf); i += VerifyUnit {
		stampUnit(buf[i:], v.lbaOf(off+int64(i)), gen, v.Seed)
	}
	if v.journal != nil {
		v.journal.Append(JournalRecord{Kind: RecIntent, Units: uint32(len(buf) / VerifyUnit), LBA: v.lbaOf(off), Gen: gen})
	}
	return gen
}

// ack records that generation gen of [off, off+n) is acknowledged.
func (v *Verifier) ack(off int64, n int, gen uint64) {
	u := v.unitOf(off)
	for i := range n / VerifyUnit {
		v.acked[u+i] = gen
	}
	if v.journal != nil {
		v.journal.Append(JournalRecord{Kind: RecAck, Units: uint32(n / VerifyUnit), LBA: v.lbaOf(off), Gen: gen})
	}
}

// check verifies data read from off against what was acknowledged; no
// write to these units is in flight.
func (v *Verifier) check(buf []byte, off int64) error {
	u := v.unitOf(off)
	for i := 0; i < len(buf); i += VerifyUnit {
		want := v.acked[u+i/VerifyUnit]
		if want == 0 {
			continue
		}
		if _, verr := judgeUnit(buf[i:], v.lbaOf(off+int64(i)), v.Seed, want, nil); verr != nil {
			return verr
		}
	}
	return nil
}
