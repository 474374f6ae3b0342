package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/meta"
)

// Snapshots and clones (doc.go, "Snapshots and clones").
//
// A snapshot is a read-only volume whose map is a frozen share of another
// volume's map: creating one copies the map's directory, not its chunks
// and no data (redirect-on-write: the volume's later writes go to new
// blocks as always, and its map copies a chunk it shares before changing
// it). A clone is a writable volume whose map starts as a share of a
// snapshot's. The volumes that share blocks form a family; as sharing
// never moves a block to another LBA, "is this block still mapped" is one
// look-up per member at the block's LBA, and a block counts live (and is
// freed) once, when the last member stops mapping it.

// SnapshotSep joins a volume's name and a snapshot's: the snapshot s1 of
// the volume db is the read-only volume "db@s1". Volume names cannot hold it.
const SnapshotSep = "@"

// ErrInUse: the volume has snapshots, or the snapshot clones, that share
// its blocks; they go first.
var ErrInUse = errors.New("store: volume in use")

// family is the set of volumes that share blocks, in ID order. Members
// change only in the writer goroutine with s.vols held: the writer reads
// it freely, others with s.vols held.
type family struct {
	members []*volume
}

// familyID is the ID the family is known by: its first volume's.
func (v *volume) familyID() meta.VolumeID {
	if v.info.Family != 0 {
		return v.info.Family
	}
	return v.info.ID
}

// sharedAt reports whether another member of v's family maps e at lba.
func (v *volume) sharedAt(lba uint64, e entry) bool {
	if len(v.fam.members) == 1 {
		return false
	}
	for _, m := range v.fam.members {
		if m != v && lba < m.blocks() && m.lmap.get(lba) == e {
			return true
		}
	}
	return false
}

// familyMaps reports whether any member of v's family maps e at lba: the
// block is live.
func (v *volume) familyMaps(lba uint64, e entry) bool {
	return (lba < v.blocks() && v.lmap.get(lba) == e) || v.sharedAt(lba, e)
}

// relocate points every map of v's family that maps relocation e's source
// at lba to to, and returns the entry they held and whether any did. A shared chunk is changed in place: every map
// holding it mapped from there, and the block's data is the same at to.
func (v *volume) relocate(lba uint64, e summaryEntry, to entry) (from entry, moved bool) {
	for _, m := range v.fam.members {
		if lba >= m.blocks() {
			continue
		}
		if cur := m.lmap.get(lba); relocationSource(cur, e) && (!moved || cur == from) {
			m.lmap.setInPlace(lba, to)
			from, moved = cur, true
		}
	}
	return from, moved
}

// own returns a chunk the map in whose slot c is may change: c itself if
// no other map holds it, else a private copy put in the slot. Writer only.
func own(slot *atomic.Pointer[mapChunk], c *mapChunk) *mapChunk {
	if c.refs <= 1 {
		return c
	}
	n := newChunk()
	for i := range c.e {
		n.e[i].Store(c.e[i].Load())
	}
	c.refs--
	slot.Store(n)
	return n
}

// setInPlace stores e for lba in the chunk as it is, shared or not. Writer
// only; lba's chunk exists.
func (m *lbaMap) setInPlace(lba uint64, e entry) {
	m.dir.Load().chunks[lba/mapChunkEntries].Load().e[lba%mapChunkEntries].Store(uint64(e))
}

// share returns a new map holding m's chunks: O(directory). Writer only.
func (m *lbaMap) share() *lbaMap {
	d := m.dir.Load()
	n := &lbaMap{}
	nd := &mapDir{blocks: d.blocks, chunks: make([]atomic.Pointer[mapChunk], len(d.chunks))}
	for ci := range d.chunks {
		if c := d.chunks[ci].Load(); c != nil {
			c.refs++
			nd.chunks[ci].Store(c)
		}
	}
	n.dir.Store(nd)
	return n
}

// replace makes m hold src's chunks (src covers no more LBAs than m; m's
// LBAs past src's are unmapped) and returns m's directory as it was.
// Writer only.
func (m *lbaMap) replace(src *lbaMap) *mapDir {
	old, sd := m.dir.Load(), src.dir.Load()
	nd := &mapDir{blocks: old.blocks, chunks: make([]atomic.Pointer[mapChunk], len(old.chunks))}
	for ci := range min(len(sd.chunks), len(nd.chunks)) {
		if c := sd.chunks[ci].Load(); c != nil {
			c.refs++
			nd.chunks[ci].Store(c)
		}
	}
	m.dir.Store(nd)
	for ci := range old.chunks {
		if c := old.chunks[ci].Load(); c != nil {
			c.refs--
		}
	}
	return old
}

// release lets go of m's chunks (its volume is deleted). Writer only.
func (m *lbaMap) release() {
	d := m.dir.Load()
	for ci := range d.chunks {
		if c := d.chunks[ci].Load(); c != nil {
			c.refs--
		}
	}
}

// familyCmd is what cmdSnapshot, cmdClone and cmdRollback act on.
type familyCmd struct {
	name string          // the new volume's name (a snapshot's full name)
	src  *volume         // the volume snapshotted; the snapshot cloned or rolled back to
	cut  cache.Seq       // snapshot, rollback: the last record the map must hold
	info meta.VolumeInfo // out: the new volume's record
}

// handleFamily serves cmdSnapshot, cmdClone and cmdRollback. A snapshot and
// a rollback drain the write buffer first, so the map they take or change
// holds every write published before the command and none after; each ends
// with a checkpoint that makes it durable, a snapshot's or clone's record
// committed with it (checkpointWith).
func (w *writer) handleFamily(c command) error {
	if c.fam.src.deleted.Load() || (c.vol != nil && c.vol.deleted.Load()) {
		return fmt.Errorf("%w: deleted while the command waited", ErrNoVolume)
	}
	switch c.kind {
	case cmdSnapshot:
		if err := w.drainTo(c.fam.cut); err != nil {
			return err
		}
		return w.addMember(c.fam, true)
	case cmdClone:
		return w.addMember(c.fam, false)
	default: // cmdRollback
		if err := w.drainTo(c.fam.cut); err != nil {
			return err
		}
		w.rollback(c.vol, c.fam.src)
		return w.checkpoint()
	}
}

// refused reports whether a family command's error is a refusal (a name
// taken, a volume gone) that leaves the store as it was, not a failure.
func refused(err error) bool { return errors.Is(err, ErrVolumeExists) || errors.Is(err, ErrNoVolume) }

// addMember creates a volume whose map is a share of fc.src's, in fc.src's
// family: a snapshot of it, or a clone of it. Its blocks are all counted
// already (fc.src maps them).
func (w *writer) addMember(fc *familyCmd, snapshot bool) error {
	s, src := w.s, fc.src
	s.vols.Lock()
	if _, ok := s.vols.byName[fc.name]; ok {
		s.vols.Unlock()
		return fmt.Errorf("%w: %q", ErrVolumeExists, fc.name)
	}
	// A member reads the blocks it shares as they are on the drives, so it
	// keeps its source's compression and encryption, and its key.
	info := meta.VolumeInfo{ID: s.vols.nextID, Name: fc.name, Size: src.size.Load(), BlockSize: BlockSize,
		Family: src.familyID(), Compression: src.info.Compression, Encryption: src.info.Encryption,
		KeyCheck: src.info.KeyCheck}
	if snapshot {
		info.SnapshotOf = src.info.ID
	} else {
		info.Origin = src.info.ID
	}
	s.vols.nextID++
	v := &volume{info: info, lmap: src.lmap.share(), fam: src.fam}
	v.ov = newOverlay(v.lmap, &s.counters.pendingWrites, &s.counters.pendingFresh)
	v.size.Store(info.Size)
	v.compression = src.compression
	v.cipher.Store(src.cipher.Load())
	v.mapped.Store(src.mapped.Load())
	src.fam.members = append(src.fam.members, v) // the highest ID: order kept
	s.vols.byName[fc.name] = v
	s.publishVolumesLocked()
	s.vols.Unlock()
	return w.checkpointWith(func(gen uint64) error {
		info.CkptGen = gen
		fc.info = info
		if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutVolume(info) }); err != nil {
			return fmt.Errorf("store: while recording %q: %w", fc.name, err)
		}
		return nil
	})
}

// rollback makes v's map a share of snap's, counting down the blocks only
// v mapped.
func (w *writer) rollback(v, snap *volume) {
	old := v.lmap.replace(snap.lmap)
	nd := v.lmap.dir.Load()
	for ci := range old.chunks {
		oc, nc := old.chunks[ci].Load(), nd.chunks[ci].Load()
		if oc == nc {
			continue
		}
		base := uint64(ci) * mapChunkEntries
		for i := range uint64(mapChunkEntries) {
			var o, n entry
			if oc != nil {
				o = entry(oc.e[i].Load())
			}
			if nc != nil {
				n = entry(nc.e[i].Load())
			}
			if o != n {
				w.account(v, base+i, o, n)
			}
		}
	}
	w.ckptDue = true
}

// leaveFamily takes a dropped volume out of its family and lets go of its
// chunks.
func (w *writer) leaveFamily(v *volume) {
	w.s.vols.Lock()
	v.fam.members = slices.DeleteFunc(v.fam.members, func(m *volume) bool { return m == v })
	w.s.vols.Unlock()
	v.lmap.release()
}

// dependentsLocked refuses to delete v while a live snapshot of it, or a
// clone of it, shares its blocks, naming them. s.vols held.
func (s *Store) dependentsLocked(v *volume) error {
	var deps []string
	for _, m := range v.fam.members {
		if m != v && !m.deleted.Load() && (m.info.SnapshotOf == v.info.ID || m.info.Origin == v.info.ID) {
			deps = append(deps, m.info.Name)
		}
	}
	if len(deps) == 0 {
		return nil
	}
	what := "snapshots"
	if v.info.SnapshotOf != 0 {
		what = "clones"
	}
	return fmt.Errorf("%w: %q has %s %s", ErrInUse, v.info.Name, what, strings.Join(deps, ", "))
}

// writable refuses writes to a snapshot.
func (h *Volume) writable() error {
	if h.v.info.SnapshotOf != 0 {
		return fmt.Errorf("%w: %q is a snapshot", backend.ErrReadOnly, h.v.info.Name)
	}
	return nil
}

// buildFamilies groups the recovered volumes into their families.
func buildFamilies(vols []*volume) {
	byID := make(map[meta.VolumeID]*family)
	for _, v := range vols {
		f := byID[v.familyID()]
		if f == nil {
			f = &family{}
			byID[v.familyID()] = f
		}
		f.members = append(f.members, v)
		v.fam = f
	}
	for _, f := range byID {
		slices.SortFunc(f.members, func(a, b *volume) int { return int(a.info.ID) - int(b.info.ID) })
	}
}

// sharedBefore reports whether a member of v's family with a lower ID maps
// e at lba: recount counts a shared block at its first holder.
func (v *volume) sharedBefore(lba uint64, e entry) bool {
	for _, m := range v.fam.members {
		if m.info.ID >= v.info.ID {
			return false
		}
		if lba < m.blocks() && m.lmap.get(lba) == e {
			return true
		}
	}
	return false
}

// reshare makes a family's maps share the chunks they hold alike again once
// a checkpoint is loaded, which gives every map its own copy: a member's
// chunk equal to the same chunk of the family's first member, or of the
// member before it, is replaced by that one. Only memory is at stake: a
// chunk shared or not reads the same, and a shared one is copied before it
// changes.
func reshare(vols []*volume) {
	for _, v := range vols {
		members := v.fam.members
		if members[0] != v {
			continue // each family once, at its first member
		}
		for i := 1; i < len(members); i++ {
			for _, from := range []*volume{members[0], members[i-1]} {
				members[i].lmap.shareEqual(from.lmap)
			}
		}
	}
}

// shareEqual replaces each of m's chunks whose entries equal src's chunk
// at the same place by src's. Before the maps are shared with readers.
func (m *lbaMap) shareEqual(src *lbaMap) {
	d, sd := m.dir.Load(), src.dir.Load()
	for ci := range min(len(d.chunks), len(sd.chunks)) {
		a, b := d.chunks[ci].Load(), sd.chunks[ci].Load()
		if a == nil || b == nil || a == b || !sameEntries(a, b) {
			continue
		}
		a.refs--
		b.refs++
		d.chunks[ci].Store(b)
	}
}

func sameEntries(a, b *mapChunk) bool {
	for i := range a.e {
		if a.e[i].Load() != b.e[i].Load() {
			return false
		}
	}
	return true
}

// fragmentOf returns the fragment of packed slot h that v's map entry for
// lba names, or -1: the one of that LBA written by v or by another member
// of v's family (a block v shares), of which a slot holds at most one
// (holdsFamilyLBA).
func (s *Store) fragmentOf(v *volume, h *packedHeader, lba uint64) int {
	if i := h.find(v.info.ID, lba); i >= 0 {
		return i
	}
	for i := h.n - 1; i >= 0; i-- {
		if f := &h.frags[i]; f.lba == lba && s.sameFamily(f.vol, v) {
			return i
		}
	}
	return -1
}

// holdsFamilyLBA reports whether packed slot h already holds a fragment of
// f's LBA from f's volume or its family: the writer then starts another
// slot, so that a member whose map names the slot finds one version of the
// LBA there, whoever of the family wrote it (the cleaner repacks members'
// versions of one LBA side by side).
func (s *Store) holdsFamilyLBA(h *packedHeader, f fragment) bool {
	v := s.volumeByID(f.vol)
	for i := range h.n {
		if g := &h.frags[i]; g.lba == f.lba && (g.vol == f.vol || (v != nil && s.sameFamily(g.vol, v))) {
			return true
		}
	}
	return false
}

// sameFamily reports whether the volume with ID id is in v's family.
func (s *Store) sameFamily(id meta.VolumeID, v *volume) bool {
	m := s.volumeByID(id)
	return m != nil && m.familyID() == v.familyID()
}
