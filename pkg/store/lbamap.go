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

// mapChunk is a run of map entries, 32 KiB.
type mapChunk [mapChunkEntries]atomic.Uint64

// lbaMap is a volume's LBA → entry map: a directory of lazily allocated
// chunks of packed uint64 entries, so an empty thin volume costs 8 bytes per
// 16 MiB and a full one 8 bytes per block.
//
// Concurrency: one writer (the store's writer goroutine) changes entries and
// allocates chunks; readers load entries at any time without locks. Each
// entry is read and written atomically.
type lbaMap struct {
	blocks uint64
	chunks []atomic.Pointer[mapChunk]
}

func newLBAMap(blocks uint64) *lbaMap {
	n := (blocks + mapChunkEntries - 1) / mapChunkEntries
	return &lbaMap{blocks: blocks, chunks: make([]atomic.Pointer[mapChunk], n)}
}

// get returns lba's entry (0: unmapped). lba < blocks.
func (m *lbaMap) get(lba uint64) entry {
	c := m.chunks[lba/mapChunkEntries].Load()
	if c == nil {
		return 0
	}
	return entry(c[lba%mapChunkEntries].Load())
}

// set stores e for lba and returns the previous entry. Writer only.
func (m *lbaMap) set(lba uint64, e entry) entry {
	slot := &m.chunks[lba/mapChunkEntries]
	c := slot.Load()
	if c == nil {
		if e == 0 {
			return 0
		}
		c = new(mapChunk)
		slot.Store(c)
	}
	return entry(c[lba%mapChunkEntries].Swap(uint64(e)))
}

// unmapRange unmaps [lba, lba+n) and calls dropped for every entry that was
// mapped. Writer only.
func (m *lbaMap) unmapRange(lba, n uint64, dropped func(entry)) {
	end := min(lba+n, m.blocks)
	for lba < end {
		ci := lba / mapChunkEntries
		next := min((ci+1)*mapChunkEntries, end)
		if c := m.chunks[ci].Load(); c != nil {
			for i := lba; i < next; i++ {
				if old := entry(c[i%mapChunkEntries].Swap(0)); old != 0 {
					dropped(old)
				}
			}
		}
		lba = next
	}
}

// forEach calls fn for every mapped entry, in LBA order.
func (m *lbaMap) forEach(fn func(lba uint64, e entry)) {
	for ci := range m.chunks {
		c := m.chunks[ci].Load()
		if c == nil {
			continue
		}
		base := uint64(ci) * mapChunkEntries
		for i := range c {
			if e := entry(c[i].Load()); e != 0 {
				fn(base+uint64(i), e)
			}
		}
	}
}

// snapshotChunk appends chunk ci's entries, little-endian, to dst and
// reports whether any is mapped. Writer only (for a consistent cut).
func (m *lbaMap) snapshotChunk(ci int, dst []byte) ([]byte, bool) {
	c := m.chunks[ci].Load()
	if c == nil {
		return dst, false
	}
	n := min(mapChunkEntries, int(m.blocks-uint64(ci)*mapChunkEntries))
	any := false
	for i := range n {
		v := c[i].Load()
		any = any || v != 0
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	return dst, any
}

// loadChunk installs a checkpointed chunk. Only before the map is shared.
func (m *lbaMap) loadChunk(ci uint32, data []byte) error {
	if int(ci) >= len(m.chunks) || len(data)%8 != 0 ||
		len(data)/8 > min(mapChunkEntries, int(m.blocks-uint64(ci)*mapChunkEntries)) {
		return fmt.Errorf("%w: checkpoint chunk %d of %d bytes for a map of %d blocks",
			ErrCorrupt, ci, len(data), m.blocks)
	}
	c := new(mapChunk)
	for i := range len(data) / 8 {
		c[i].Store(binary.LittleEndian.Uint64(data[8*i:]))
	}
	m.chunks[ci].Store(c)
	return nil
}
