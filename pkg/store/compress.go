package store

import (
	"errors"
	"fmt"

	"basalt/cache"
	"basalt/pkg/compress"
)

// errBatchFull: room closed the batch's last stripe, slot-full while its
// packed slot was open; the caller writes the batch before adding more.
var errBatchFull = errors.New("store: batch full")

// packedBit marks a map entry (and a relocation's source) whose PBN is a
// packed slot: bit 31 of the PBN+1 field, which bounds a node to 2^31-1
// PBNs (8 TiB of data slots). It is set by the writer from the summary
// entry's frag, never from anything in the data.
const packedBit = 1 << 31

// makePackedEntry is the map entry of a block compressed into the packed
// slot pbn whose CRC32C is sum.
func makePackedEntry(pbn PBN, sum uint32) entry { return makeEntry(pbn, sum) | packedBit }

// packed reports whether e's block is a fragment of a packed slot.
func (e entry) packed() bool { return e&packedBit != 0 }

// slotEntry is the map entry summary entry e makes for its slot pbn.
func slotEntry(pbn PBN, e summaryEntry) entry {
	if e.frag != 0 {
		return makePackedEntry(pbn, e.sum)
	}
	return makeEntry(pbn, e.sum)
}

// relocationSource reports whether cur, a map entry, is still the source
// of relocation e. A raw block moved raw compares the whole entry; a block
// moved out of or into a packed slot changes its checksum (the slot's), so
// only the address is compared: a slot is not reused before its segment is
// freed, which needs every entry pointing at it gone (doc.go, "Cleaning").
func relocationSource(cur entry, e summaryEntry) bool {
	if e.frag == 0 && e.from&packedBit == 0 {
		return cur == entry(uint64(e.sum)<<32|uint64(e.from))
	}
	return cur.mapped() && uint32(cur) == e.from
}

// slotCursor assigns data slots to a summary's entries in order: an entry
// with frag 0 or 1 takes the next slot; frag k > 1 joins the packed slot
// the latest frag-1 entry started, as its k-th fragment.
type slotCursor struct {
	used   int // slots taken
	packed int // slot of the latest packed slot, -1 before one
	frags  int // fragments it holds so far
}

var errFragmentOrder = errors.New("fragment out of order")

// next returns the slot of entry e, which must have data.
func (c *slotCursor) next(e summaryEntry) (int, error) {
	if !e.kind.hasData() {
		return 0, nil
	}
	switch {
	case e.frag == 0:
	case e.frag == 1:
		c.packed, c.frags = c.used, 1
	case c.used == 0 || int(e.frag) != c.frags+1:
		return 0, fmt.Errorf("%w: fragment %d after %d", errFragmentOrder, e.frag, c.frags)
	default:
		c.frags++
		return c.packed, nil
	}
	c.used++
	return c.used - 1, nil
}

// packBuild is the packed slot a stripe being filled is packing into.
type packBuild struct {
	open    bool
	q       int // its slot
	h       packedHeader
	entries [maxFragments]int // the stripe entries of its fragments
}

func (p *packBuild) reset() { p.open = false }

// addBlock puts one block of v into the current stripe (room must have
// been called): compressed into a packed slot when v compresses and the
// block shrinks to maxFragmentBytes or less, else in a slot of its own.
// e.sum is the block's CRC32C.
func (w *writer) addBlock(st *stream, v *volume, e summaryEntry, seq cache.Seq, data []byte) {
	alg := v.compression
	if alg != compress.None {
		if w.comp == nil {
			w.comp, w.compBuf = compress.NewCompressor(), make([]byte, maxFragmentBytes)
		}
		n, ok, err := w.comp.Compress(alg, w.compBuf, data)
		if err == nil && ok {
			opened := w.addFragment(st, e, seq, fragment{lba: e.lba, vol: e.vol, sum: e.sum, alg: alg}, w.compBuf[:n])
			w.countPacked(st, v, opened)
			return
		}
	}
	w.countPacked(st, v, true)
	w.addData(st, e, seq, data)
}

// countPacked counts a host block of v packed, and the 4096 bytes of a
// slot if it took a new one (relocated blocks were counted when written).
func (w *writer) countPacked(st *stream, v *volume, newSlot bool) {
	if st.kind != streamHost {
		return
	}
	v.logicalBytes.Add(BlockSize)
	w.s.counters.logicalBytes.Add(BlockSize)
	if newSlot {
		v.storedBytes.Add(BlockSize)
		w.s.counters.storedBytes.Add(BlockSize)
	}
}

// unpackInPlace replaces block, the packed slot holding e's block, by
// that block decompressed, and returns its CRC32C.
func (w *writer) unpackInPlace(block []byte, e summaryEntry) (uint32, error) {
	if w.unpackBuf == nil {
		w.unpackBuf = make([]byte, BlockSize)
	}
	slot := w.unpackBuf
	copy(slot, block)
	var h packedHeader
	if err := parsePackedHeader(slot, &h); err != nil {
		return 0, err
	}
	i := h.find(e.vol, e.lba)
	if i < 0 {
		return 0, fmt.Errorf("%w: no fragment of volume %d block %d", ErrBadPackedSlot, e.vol, e.lba)
	}
	if err := unpackFragment(slot, &h, i, block); err != nil {
		return 0, err
	}
	return h.frags[i].sum, nil
}

// addFragment adds a compressed block to the current stripe's packed slot,
// starting a new one in the next data slot when it does not fit (and then
// reports true).
func (w *writer) addFragment(st *stream, e summaryEntry, seq cache.Seq, f fragment, comp []byte) bool {
	b := st.fill
	rel, sb := len(b.stripes)-1, b.current()
	p := &sb.pack
	if p.open && (!p.h.fits(len(comp)) || w.s.holdsFamilyLBA(&p.h, f)) {
		w.closePacked(b, rel)
	}
	opened := !p.open
	if opened {
		*p = packBuild{open: true, q: sb.slots}
		sb.slots++
	}
	p.h.add(b.slot(rel, p.q, w.s.lay.chunkSize), f, comp)
	p.entries[p.h.n-1] = len(sb.entries)
	e.frag = uint8(p.h.n)
	sb.entries = append(sb.entries, e)
	sb.seqs = append(sb.seqs, seq)
	sh := b.geom.shape
	if len(sb.entries) == sh.entryCap || (sb.slots == sh.slots && p.h.n == maxFragments) {
		w.closeStripe(st, sb)
	}
	return opened
}

// closePacked ends stripe rel's packed slot, if open: its entries take the
// slot's CRC32C, which their map entries will carry.
func (w *writer) closePacked(b *batch, rel int) {
	sb := b.stripes[rel]
	p := &sb.pack
	if !p.open {
		return
	}
	sum := blockSum(b.slot(rel, p.q, w.s.lay.chunkSize))
	for _, i := range p.entries[:p.h.n] {
		sb.entries[i].sum = sum
	}
	p.open = false
}

// readPacked reads lba's block, a fragment of a packed slot, into p, and
// the following blocks up to max whose map entries point at the same slot
// and have no newer version in the buffer: the slot is read once (and
// checked, reconstructed if need be) as any block, then each block's
// fragment found and decompressed straight into p. It returns the blocks
// read.
func (s *Store) readPacked(v *volume, lba uint64, e entry, p []byte, max int) (int, error) {
	bp := s.chunkBuffer()
	defer s.putChunkBuffer(bp)
	slot := (*bp)[:BlockSize]
	if err := s.readBlock(v, lba, e, slot); err != nil {
		return 0, err
	}
	var h packedHeader
	if err := parsePackedHeader(slot, &h); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	n := 0
	for n < min(max, h.n) {
		if n > 0 {
			if v.lmap.get(lba+uint64(n)) != e {
				break
			}
			if _, pending := v.ov.lookup(lba + uint64(n)); pending {
				break
			}
		}
		i := s.fragmentOf(v, &h, lba+uint64(n))
		if i < 0 {
			return n, fmt.Errorf("%w: packed slot %d holds no fragment of volume %d block %d", ErrCorrupt,
				e.pbn(), v.info.ID, lba+uint64(n))
		}
		if err := unpackFragment(slot, &h, i, p[n*BlockSize:(n+1)*BlockSize]); err != nil {
			return n, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		n++
	}
	return n, nil
}

// Compression returns how the store packs the volume's blocks.
func (v *Volume) Compression() compress.Algorithm { return v.v.compression }

// CompressionStats returns the volume's host blocks packed into stripes
// since Open, in bytes, and the bytes they took in their slots.
func (v *Volume) CompressionStats() (logical, stored int64) {
	return v.v.logicalBytes.Load(), v.v.storedBytes.Load()
}

// fragmentCount recomputes the segments' fragments at recovery from the
// maps: a packed slot that n live entries point at counts n-1. Fragments
// no longer live are not counted, so a segment's capacity is then a lower
// bound (the cleaner finds it fuller than it is, never emptier).
type fragmentCount struct{ seen map[PBN]struct{} }

func (s *Store) newFragmentCount() *fragmentCount {
	for _, g := range s.segs {
		g.fragments.Store(0)
	}
	return &fragmentCount{seen: make(map[PBN]struct{})}
}

func (f *fragmentCount) add(g *segment, e entry) {
	if !e.packed() {
		return
	}
	if _, ok := f.seen[e.pbn()]; ok {
		g.fragments.Add(1)
		return
	}
	f.seen[e.pbn()] = struct{}{}
}
