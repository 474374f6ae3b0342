package store

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/invariant"
	"basalt/pkg/meta"
)

// stagedRecordBlocks bounds the blocks of one staged write record, whose
// checksums its descriptor holds: a longer write is staged as several
// records.
const stagedRecordBlocks = 16

// stagedRingStart is the descriptors a ring starts with; it doubles when
// they are all live, so a store in steady state allocates nothing.
const stagedRingStart = 1024

// stagedRec describes one staged record. An append fills the slot under
// refRing.mu; the writer and the readers read it while the record is live
// (under refRing.gate for reading); release, drop and close clear data and
// v under both locks. A slot is reused only for a record appended after
// its own was released.
type stagedRec struct {
	seq     cache.Seq
	kind    cache.Kind // recordWrite or recordUnmap
	tracked bool       // WriteStaged or TrimStaged: counts in v's floor
	count   uint32     // blocks
	vol     meta.VolumeID
	lba     uint64
	token   uint64  // tracked: the caller's position of the write
	v       *volume // tracked: whose floor the record holds
	bytes   int64   // data bytes referenced; 0 once dropped
	data    []byte  // count blocks (nil for an unmap, or once dropped)
	sums    [4 * stagedRecordBlocks]byte
}

// stagedState is a volume's part of a refRing: its tracked records, oldest
// first, linked through refRing.links, and the floor they make. head,
// tail and lastToken are the ring's (under refRing.mu); floor is read
// anywhere.
type stagedState struct {
	head, tail cache.Seq // oldest and newest tracked record not released; 0: none
	lastToken  uint64
	// floor is head's token + 1, 0 when no tracked record is outstanding.
	floor atomic.Uint64
}

// refRing stages writes by reference (Options.StageByReference): each
// record is a descriptor of the caller's bytes, with the per-block
// checksums computed at staging time; nothing is copied and nothing
// survives the process. Records are numbered from 1 per Open, like a
// fresh write buffer's, under a new identity each time, so that a
// checkpoint's BufferSeq never applies to them.
//
// Appends (several Raft groups' apply loops) serialize on mu, a short
// critical section that never waits for space: the ring grows instead.
// Readers copy a staged block under gate (shared); release, drop and close
// take gate exclusively, so a reader that holds a record has finished
// with the caller's bytes before the record is released and the floor
// reports it.
type refRing struct {
	mu   sync.Mutex   // appends, links, floors, growth; lock order: mu, then gate
	gate sync.RWMutex // readers and views (shared) against release, drop, growth and close

	recs  []stagedRec // power-of-two length; record seq lives in recs[seq&mask]
	links []cache.Seq // the next tracked record of the same volume, 0 if none yet (mu)
	mask  uint64
	next  cache.Seq // the next record's sequence (mu)

	released atomic.Uint64 // every record <= this is released
	last     atomic.Uint64 // the newest record
	bytes    atomic.Int64  // data bytes referenced
	failed   atomic.Bool
	closed   bool // written under mu and gate; read under either
	size     int64
	id       [16]byte
}

var _ stager = (*refRing)(nil)

func newRefRing(size int64, id [16]byte) *refRing {
	return &refRing{recs: make([]stagedRec, stagedRingStart), links: make([]cache.Seq, stagedRingStart),
		mask: stagedRingStart - 1, next: 1, size: size, id: id}
}

// append stages in (whose seq it sets) and returns its sequence. It fails
// with backend.ErrClosed after close or once in's volume is deleted, and
// with ErrStaging for a tracked record whose token is below its volume's
// previous one.
func (r *refRing) append(in *stagedRec) (cache.Seq, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admitLocked(in); err != nil {
		return 0, err
	}
	if uint64(r.next)-r.released.Load() > uint64(len(r.recs)) {
		r.growLocked()
	}
	seq := r.next
	i := uint64(seq) & r.mask
	r.recs[i] = *in
	r.recs[i].seq = seq
	r.links[i] = 0
	if in.tracked {
		r.linkLocked(in.v, seq, in.token)
	}
	r.next++
	r.last.Store(uint64(seq))
	r.bytes.Add(in.bytes)
	return seq, nil
}

func (r *refRing) admitLocked(in *stagedRec) error {
	switch {
	case r.closed:
		return backend.ErrClosed
	case in.v != nil && in.v.deleted.Load():
		return backend.ErrClosed
	case in.tracked && in.v.staged.lastToken > in.token:
		return fmt.Errorf("%w: token %d after token %d of %v", ErrStaging, in.token, in.v.staged.lastToken,
			in.v.info.ID)
	}
	return nil
}

// linkLocked appends tracked record seq to v's list.
func (r *refRing) linkLocked(v *volume, seq cache.Seq, token uint64) {
	st := &v.staged
	if st.tail == 0 {
		st.head = seq
		st.floor.Store(token + 1)
	} else {
		r.links[uint64(st.tail)&r.mask] = seq
	}
	st.tail, st.lastToken = seq, token
}

// growLocked doubles the ring, every live record keeping its sequence.
// Views the writer holds keep reading the old descriptors, which nothing
// writes again.
func (r *refRing) growLocked() {
	r.gate.Lock()
	defer r.gate.Unlock()
	n := uint64(2 * len(r.recs))
	recs, links := make([]stagedRec, n), make([]cache.Seq, n)
	for seq := r.released.Load() + 1; seq < uint64(r.next); seq++ {
		recs[seq&(n-1)], links[seq&(n-1)] = r.recs[seq&r.mask], r.links[seq&r.mask]
	}
	r.recs, r.links, r.mask = recs, links, n-1
}

// view returns a record for the writer. Its sums alias the descriptor and
// its data the caller's bytes: both stay valid until the writer releases
// seq. A dropped record (its volume deleted) has no data; the writer skips
// it by its volume.
func (r *refRing) view(seq cache.Seq) (record, error) {
	r.gate.RLock()
	defer r.gate.RUnlock()
	rec := &r.recs[uint64(seq)&r.mask]
	if uint64(seq) <= r.released.Load() || rec.seq != seq {
		return record{}, invariant.Failf("store: staged record %v is not live (released up to %d)", seq,
			r.released.Load())
	}
	out := record{kind: rec.kind, vol: rec.vol, lba: rec.lba, count: int(rec.count), data: rec.data}
	if rec.kind == recordWrite {
		out.sums = rec.sums[:4*rec.count]
	}
	return out, nil
}

// readBlock copies a staged block from the caller's bytes and checks it
// against the checksum computed when it was staged: bytes changed since
// (which the contract forbids) read as a media error, not as wrong data.
func (r *refRing) readBlock(_ *readScratch, ref pendingRef, dst []byte) error {
	r.gate.RLock()
	defer r.gate.RUnlock()
	if r.closed {
		return backend.ErrClosed
	}
	rec := &r.recs[uint64(ref.seq)&r.mask]
	i := int(ref.index)
	if uint64(ref.seq) <= r.released.Load() || rec.seq != ref.seq || rec.data == nil || i >= int(rec.count) {
		return errRetry // released (the map has the block now) or dropped
	}
	copy(dst, rec.data[i*BlockSize:(i+1)*BlockSize])
	if blockSum(dst[:BlockSize]) != binary.LittleEndian.Uint32(rec.sums[4*i:]) {
		return fmt.Errorf("%w: staged block %d of record %v changed after it was staged", backend.ErrMedia, i,
			ref.seq)
	}
	return nil
}

// release lets go of the records up to seq and moves their volumes'
// floors past them. A failed store releases nothing.
func (r *refRing) release(seq cache.Seq) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed.Load() {
		return fmt.Errorf("%w: staged records are kept once the store has failed", ErrFailed)
	}
	if seq >= r.next {
		return invariant.Failf("store: release of staged records up to %v, the last is %v", seq, r.next-1)
	}
	r.gate.Lock()
	defer r.gate.Unlock()
	for s := r.released.Load() + 1; s <= uint64(seq); s++ {
		rec := &r.recs[s&r.mask]
		if rec.tracked {
			if err := r.unlinkLocked(rec, cache.Seq(s)); err != nil {
				return err
			}
		}
		r.bytes.Add(-rec.bytes)
		rec.data, rec.v, rec.bytes, rec.tracked = nil, nil, 0, false
	}
	r.released.Store(uint64(seq))
	return nil
}

// unlinkLocked removes rec, the oldest tracked record of its volume, from
// the volume's list and moves its floor to the next one's token.
func (r *refRing) unlinkLocked(rec *stagedRec, seq cache.Seq) error {
	st := &rec.v.staged
	if st.head != seq {
		return invariant.Failf("store: staged record %v of %v released while record %v is its oldest", seq,
			rec.vol, st.head)
	}
	next := r.links[uint64(seq)&r.mask]
	if next == 0 {
		st.head, st.tail = 0, 0
		st.floor.Store(0)
		return nil
	}
	st.head = next
	st.floor.Store(r.recs[uint64(next)&r.mask].token + 1)
	return nil
}

// drop forgets the caller's bytes of a deleted volume's records: once it
// returns, no reader holds them and none will read them. The records stay
// in the sequence (the writer skips them) and the volume's floor reports
// none.
func (r *refRing) drop(v *volume) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate.Lock()
	defer r.gate.Unlock()
	st := &v.staged
	for seq := st.head; seq != 0; seq = r.links[uint64(seq)&r.mask] {
		rec := &r.recs[uint64(seq)&r.mask]
		r.bytes.Add(-rec.bytes)
		rec.data, rec.v, rec.bytes, rec.tracked = nil, nil, 0, false
	}
	st.head, st.tail = 0, 0
	st.floor.Store(0)
}

func (r *refRing) usage() stageUsage {
	released := r.released.Load() // first: released <= last then
	last := r.last.Load()
	return stageUsage{mode: "staged by reference", size: r.size, used: r.bytes.Load(), live: int(last - released),
		last: cache.Seq(last)}
}

func (r *refRing) uuid() [16]byte { return r.id }

// durable: nothing staged survives a crash; the caller replays it.
func (r *refRing) durable() bool { return false }

func (r *refRing) fail() { r.failed.Store(true) }

// close forgets every caller's bytes. The floors stay as they were: what
// they report as not yet durable is what the caller replays.
func (r *refRing) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate.Lock()
	defer r.gate.Unlock()
	r.closed = true
	for seq := r.released.Load() + 1; seq < uint64(r.next); seq++ {
		rec := &r.recs[seq&r.mask]
		rec.data, rec.v = nil, nil
	}
	return nil
}
