package store

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"basalt/pkg/meta"
)

// mapChunkEntries is the number of entries in one map chunk; it matches the
// checkpoint chunk so a chunk is checkpointed as one value.
const mapChunkEntries = meta.ChunkEntries

// mapChunk is a run of map entries, 32 KiB. A chunk may be shared by the
// maps of a volume family (snapshot.go): refs counts the maps that hold it,
// and a map changes a shared chunk only through a private copy (own), so a
// snapshot's map stays as it was. refs belongs to the writer.
type mapChunk struct {
	e    [mapChunkEntries]atomic.Uint64
	refs int32
}

// newChunk returns an unshared, empty chunk.
func newChunk() *mapChunk { return &mapChunk{refs: 1} }

// lbaMap is a volume's LBA → entry map: a directory of lazily allocated
// chunks of packed uint64 entries, so an empty thin volume costs 8 bytes per
// 16 MiB and a full one 8 bytes per block.
//
// Concurrency: one writer (the store's writer goroutine) changes entries,
// allocates chunks and grows the directory; readers load entries at any
// time without locks. Each entry is read and written atomically, and the
// directory is replaced, never changed in place, when the map grows.
type lbaMap struct {
	dir atomic.Pointer[mapDir]
}

// mapDir is one version of a map's directory: the map covers LBAs
// [0, blocks), chunk ci covering [ci*mapChunkEntries, (ci+1)*mapChunkEntries).
type mapDir struct {
	blocks uint64
	chunks []atomic.Pointer[mapChunk]
}

func newLBAMap(blocks uint64) *lbaMap {
	m := &lbaMap{}
	m.dir.Store(&mapDir{blocks: blocks, chunks: make([]atomic.Pointer[mapChunk], chunksFor(blocks))})
	return m
}

// chunksFor is the number of chunks that cover blocks LBAs.
func chunksFor(blocks uint64) uint64 { return (blocks + mapChunkEntries - 1) / mapChunkEntries }

// len returns the number of LBAs the map covers.
func (m *lbaMap) len() uint64 { return m.dir.Load().blocks }

// grow makes the map cover blocks LBAs; a smaller or equal count is a
// no-op. New LBAs are unmapped. Writer only (or before the map is shared):
// the new directory takes the chunks the old one has at this moment.
func (m *lbaMap) grow(blocks uint64) {
	old := m.dir.Load()
	if blocks <= old.blocks {
		return
	}
	d := &mapDir{blocks: blocks, chunks: make([]atomic.Pointer[mapChunk], chunksFor(blocks))}
	for ci := range old.chunks {
		d.chunks[ci].Store(old.chunks[ci].Load())
	}
	m.dir.Store(d)
}

// get returns lba's entry (0: unmapped). lba < len().
func (m *lbaMap) get(lba uint64) entry {
	c := m.dir.Load().chunks[lba/mapChunkEntries].Load()
	if c == nil {
		return 0
	}
	return entry(c.e[lba%mapChunkEntries].Load())
}

// set stores e for lba and returns the previous entry. Writer only.
func (m *lbaMap) set(lba uint64, e entry) entry {
	slot := &m.dir.Load().chunks[lba/mapChunkEntries]
	c := slot.Load()
	if c == nil {
		if e == 0 {
			return 0
		}
		c = newChunk()
		slot.Store(c)
	}
	c = own(slot, c)
	return entry(c.e[lba%mapChunkEntries].Swap(uint64(e)))
}

// unmapRange unmaps [lba, lba+n) and calls dropped for every entry that was
// mapped. Writer only.
func (m *lbaMap) unmapRange(lba, n uint64, dropped func(uint64, entry)) {
	d := m.dir.Load()
	end := min(lba+n, d.blocks)
	for lba < end {
		ci := lba / mapChunkEntries
		next := min((ci+1)*mapChunkEntries, end)
		if c := d.chunks[ci].Load(); c != nil {
			c = own(&d.chunks[ci], c)
			for i := lba; i < next; i++ {
				if old := entry(c.e[i%mapChunkEntries].Swap(0)); old != 0 {
					dropped(i, old)
				}
			}
		}
		lba = next
	}
}

// forEach calls fn for every mapped entry, in LBA order.
func (m *lbaMap) forEach(fn func(lba uint64, e entry)) {
	d := m.dir.Load()
	for ci := range d.chunks {
		c := d.chunks[ci].Load()
		if c == nil {
			continue
		}
		base := uint64(ci) * mapChunkEntries
		for i := range c.e {
			if e := entry(c.e[i].Load()); e != 0 {
				fn(base+uint64(i), e)
			}
		}
	}
}

// chunkCount returns the number of chunks the directory has.
func (m *lbaMap) chunkCount() int { return len(m.dir.Load().chunks) }

// snapshotChunk appends chunk ci's entries, little-endian, to dst and
// reports whether any is mapped. ci < chunkCount(). Writer only (for a
// consistent cut).
func (m *lbaMap) snapshotChunk(ci int, dst []byte) ([]byte, bool) {
	d := m.dir.Load()
	c := d.chunks[ci].Load()
	if c == nil {
		return dst, false
	}
	n := min(mapChunkEntries, int(d.blocks-uint64(ci)*mapChunkEntries))
	any := false
	for i := range n {
		v := c.e[i].Load()
		any = any || v != 0
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	return dst, any
}

// loadChunk installs a checkpointed chunk. Only before the map is shared.
// A chunk checkpointed before the volume grew may be shorter than the
// chunk is now; the rest of it is unmapped.
func (m *lbaMap) loadChunk(ci uint32, data []byte) error {
	d := m.dir.Load()
	if int(ci) >= len(d.chunks) || len(data)%8 != 0 ||
		len(data)/8 > min(mapChunkEntries, int(d.blocks-uint64(ci)*mapChunkEntries)) {
		return fmt.Errorf("%w: checkpoint chunk %d of %d bytes for a map of %d blocks",
			ErrCorrupt, ci, len(data), d.blocks)
	}
	c := newChunk()
	for i := range len(data) / 8 {
		c.e[i].Store(binary.LittleEndian.Uint64(data[8*i:]))
	}
	d.chunks[ci].Store(c)
	return nil
}
