package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"sync/atomic"
	"testing"

	"basalt/cache"
	"basalt/pkg/meta"
)

func sampleSummary() *summary {
	return &summary{blocks: 1, seq: 42, durable: 40, bufferSeq: 17, segment: 3, gen: 2, stripe: 1, data: 3,
		parity: 1, stream: streamHost, paritySums: []uint32{1, 2, 3},
		entries: []summaryEntry{
			{kind: kindWrite, vol: 1, lba: 10, sum: 0xdeadbeef},
			{kind: kindUnmap, vol: 1, lba: 100, sum: 64},
			{kind: kindRelocate, vol: 2, lba: 7, sum: 5, from: 99},
		}}
}

func encodedSummary(s *summary) []byte {
	b := make([]byte, s.blocks*BlockSize)
	encodeSummary(b, s)
	return b
}

func TestSummaryRoundTrip(t *testing.T) {
	want := sampleSummary()
	b := encodedSummary(want)
	var got summary
	if err := decodeSummary(b, 4, &got); err != nil {
		t.Fatal(err)
	}
	if got.seq != 42 || got.durable != 40 || got.bufferSeq != 17 || got.segment != 3 || got.gen != 2 ||
		got.stripe != 1 || got.data != 3 || got.parity != 1 || len(got.paritySums) != 3 || len(got.entries) != 3 {
		t.Fatalf("decoded %+v", got)
	}
	for i, e := range want.entries {
		if got.entries[i] != e {
			t.Errorf("entry %d: %+v, want %+v", i, got.entries[i], e)
		}
	}
}

// resum recomputes a summary's checksum after a test altered it, so that
// the decoder's field checks, not the checksum, have to catch the change.
func resum(b []byte) []byte {
	end := len(b) - 4
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b
}

func TestSummaryDecoderRejectsMalformedInput(t *testing.T) {
	cases := []struct {
		name  string
		alter func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:100] }},
		{"not a block multiple", func(b []byte) []byte { return append(b, 0) }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"checksum", func(b []byte) []byte { b[100] ^= 1; return b }},
		{"version", func(b []byte) []byte { b[4] = 9; return resum(b) }},
		{"reserved header byte", func(b []byte) []byte { b[55] = 1; return resum(b) }},
		{"summary blocks", func(b []byte) []byte { b[6] = 2; return resum(b) }},
		{"zero data chunks", func(b []byte) []byte { b[44] = 0; return resum(b) }},
		{"parity count", func(b []byte) []byte { b[48] = 5; return resum(b) }},
		{"too many entries", func(b []byte) []byte { b[50], b[51] = 0xff, 0xff; return resum(b) }},
		{"sequence 0", func(b []byte) []byte { clear(b[8:16]); clear(b[16:24]); return resum(b) }},
		{"durable not below sequence", func(b []byte) []byte { b[16] = 42; return resum(b) }},
		{"entry kind", func(b []byte) []byte { b[64+12+20] = 9; return resum(b) }},
		{"entry reserved", func(b []byte) []byte { b[64+12+22] = 1; return resum(b) }},
		{"fragment out of order", func(b []byte) []byte { b[64+12+21] = 2; return resum(b) }},
		{"fragment beyond 8", func(b []byte) []byte { b[64+12+21] = maxFragments + 1; return resum(b) }},
		{"unmap fragment", func(b []byte) []byte { b[64+12+24+21] = 1; return resum(b) }},
		{"entry volume 0", func(b []byte) []byte { clear(b[64+12+8 : 64+12+12]); return resum(b) }},
		{"write with a source", func(b []byte) []byte { b[64+12+16] = 1; return resum(b) }},
		{"unmap of nothing", func(b []byte) []byte { clear(b[64+12+24+12 : 64+12+24+16]); return resum(b) }},
		{"relocation without source", func(b []byte) []byte { clear(b[64+12+48+16 : 64+12+48+20]); return resum(b) }},
		{"junk after entries", func(b []byte) []byte { b[1000] = 1; return resum(b) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s summary
			err := decodeSummary(c.alter(encodedSummary(sampleSummary())), 4, &s)
			if !errors.Is(err, ErrBadSummary) {
				t.Fatalf("decode: %v, want ErrBadSummary", err)
			}
		})
	}
}

func TestSummaryDecoderRejectsTooManyDataEntries(t *testing.T) {
	s := sampleSummary()
	for range 8 { // 3 data chunks of 3 payload blocks: 9 slots
		s.entries = append(s.entries, summaryEntry{kind: kindWrite, vol: 1, lba: 1, sum: 1})
	}
	var got summary
	if err := decodeSummary(encodedSummary(s), 4, &got); !errors.Is(err, ErrBadSummary) {
		t.Fatalf("10 data entries for 9 slots: %v", err)
	}
}

func FuzzDecodeSummary(f *testing.F) {
	f.Add(encodedSummary(sampleSummary()), 4)
	s := sampleSummary()
	s.blocks, s.paritySums = 2, make([]uint32, 6)
	f.Add(encodedSummary(s), 5)
	f.Add(make([]byte, BlockSize), 4)
	f.Fuzz(func(t *testing.T, b []byte, chunkBlocks int) {
		if chunkBlocks < 2 || chunkBlocks > 64 {
			return
		}
		var s summary
		if err := decodeSummary(b, chunkBlocks, &s); err != nil {
			if !errors.Is(err, ErrBadSummary) {
				t.Fatalf("error not wrapping ErrBadSummary: %v", err)
			}
			return
		}
		// Whatever decodes re-encodes to the same bytes: the format has one
		// encoding per summary, so nothing the decoder accepts is ignored.
		if again := encodedSummary(&s); !bytes.Equal(again, b) {
			t.Fatalf("decoded summary re-encodes differently")
		}
	})
}

func writeRecordPayload(vol uint32, lba uint64, blocks ...uint64) []byte {
	data := make([]byte, len(blocks)*BlockSize)
	for i, tag := range blocks {
		makeBlock(data[i*BlockSize:], tag)
	}
	hdr := make([]byte, recordHeaderLen)
	encodeRecordHeader(hdr, meta.VolumeID(vol), lba, len(blocks))
	for i := range blocks {
		hdr = binary.LittleEndian.AppendUint32(hdr, blockSum(data[i*BlockSize:(i+1)*BlockSize]))
	}
	return append(hdr, data...)
}

func TestRecordRoundTripAndMalformed(t *testing.T) {
	p := writeRecordPayload(1, 9, 5, 6)
	r, err := decodeRecord(recordWrite, p)
	if err != nil || r.vol != 1 || r.lba != 9 || r.count != 2 {
		t.Fatalf("decode: %+v %v", r, err)
	}
	if blockSum(r.block(1)) != r.sum(1) {
		t.Fatal("block checksum does not match")
	}
	var unmap [recordHeaderLen]byte
	encodeRecordHeader(unmap[:], 3, 1<<40, 1000)
	if r, err := decodeRecord(recordUnmap, unmap[:]); err != nil || r.count != 1000 || r.lba != 1<<40 {
		t.Fatalf("unmap: %+v %v", r, err)
	}
	cases := []struct {
		name string
		kind cache.Kind
		p    []byte
	}{
		{"empty", recordWrite, nil},
		{"volume 0", recordWrite, writeRecordPayload(0, 1, 1)},
		{"truncated data", recordWrite, writeRecordPayload(1, 1, 1)[:100]},
		{"extra byte", recordWrite, append(writeRecordPayload(1, 1, 1), 0)},
		{"unknown kind", cache.Kind(9), unmap[:]},
		{"unmap with payload", recordUnmap, append(unmap[:], 0)},
		{"zero blocks", recordUnmap, make([]byte, recordHeaderLen)},
		{"wrapping range", recordUnmap, func() []byte {
			b := append([]byte(nil), unmap[:]...)
			binary.LittleEndian.PutUint64(b[8:], ^uint64(0))
			return b
		}()},
	}
	for _, c := range cases {
		if _, err := decodeRecord(c.kind, c.p); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", c.name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(uint8(recordWrite), writeRecordPayload(1, 9, 5, 6))
	var unmap [recordHeaderLen]byte
	encodeRecordHeader(unmap[:], 3, 7, 10)
	f.Add(uint8(recordUnmap), unmap[:])
	f.Fuzz(func(t *testing.T, kind uint8, p []byte) {
		r, err := decodeRecord(cache.Kind(kind), p)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error not wrapping ErrBadRecord: %v", err)
			}
			return
		}
		if r.vol == 0 || r.count == 0 || r.lba+uint64(r.count) < r.lba {
			t.Fatalf("accepted %+v", r)
		}
		if r.kind == recordWrite {
			_ = r.block(r.count - 1) // in range
			_ = r.sum(r.count - 1)
		}
	})
}

func TestMapEntryPacking(t *testing.T) {
	for _, c := range []struct {
		pbn PBN
		sum uint32
	}{{0, 0}, {0, 0xffffffff}, {packedBit - 2, 1}, {12345, 0x80000000}} {
		e := makeEntry(c.pbn, c.sum)
		if !e.mapped() || e.packed() || e.pbn() != c.pbn || e.sum() != c.sum {
			t.Errorf("entry(%d, %#x) = %#x: pbn %d sum %#x", c.pbn, c.sum, uint64(e), e.pbn(), e.sum())
		}
		p := makePackedEntry(c.pbn, c.sum)
		if !p.mapped() || !p.packed() || p.pbn() != c.pbn || p.sum() != c.sum {
			t.Errorf("packed entry(%d, %#x) = %#x: pbn %d sum %#x", c.pbn, c.sum, uint64(p), p.pbn(), p.sum())
		}
	}
	if entry(0).mapped() {
		t.Error("zero entry is mapped")
	}
}

func TestLBAMap(t *testing.T) {
	m := newLBAMap(2*mapChunkEntries + 10)
	if m.get(5) != 0 || m.chunkCount() != 3 || m.len() != 2*mapChunkEntries+10 {
		t.Fatal("new map not empty")
	}
	m.set(5, 7)
	m.set(mapChunkEntries*2+9, 8)
	if old := m.set(5, 9); old != 7 {
		t.Fatalf("set returned %d, want 7", old)
	}
	if m.dir.Load().chunks[1].Load() != nil {
		t.Fatal("untouched chunk allocated")
	}
	var dropped []entry
	m.unmapRange(0, 3*mapChunkEntries, func(_ uint64, e entry) { dropped = append(dropped, e) })
	if len(dropped) != 2 || m.get(5) != 0 {
		t.Fatalf("unmapRange dropped %v", dropped)
	}
	m.set(mapChunkEntries*2+3, 11)
	data, mapped := m.snapshotChunk(2, nil)
	if !mapped || len(data) != 8*10 {
		t.Fatalf("snapshot of the short last chunk: %d bytes, mapped %v", len(data), mapped)
	}
	n := newLBAMap(m.len())
	if err := n.loadChunk(2, data); err != nil || n.get(mapChunkEntries*2+3) != 11 {
		t.Fatalf("loadChunk: %v", err)
	}
	if err := n.loadChunk(2, make([]byte, 8*11)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("oversized chunk: %v", err)
	}
	if err := n.loadChunk(7, data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("chunk beyond the map: %v", err)
	}
}

// TestLBAMapGrow grows a map across a chunk boundary: entries stay, the new
// LBAs are unmapped and settable, a chunk checkpointed short before the
// growth loads into the grown map, and a smaller count changes nothing.
func TestLBAMapGrow(t *testing.T) {
	m := newLBAMap(mapChunkEntries + 10)
	m.set(3, 5)
	m.set(mapChunkEntries+9, 6) // the last LBA, in the short last chunk
	short, _ := m.snapshotChunk(1, nil)
	m.grow(3*mapChunkEntries + 1)
	if m.len() != 3*mapChunkEntries+1 || m.chunkCount() != 4 {
		t.Fatalf("grown map: %d blocks in %d chunks", m.len(), m.chunkCount())
	}
	if m.get(3) != 5 || m.get(mapChunkEntries+9) != 6 || m.get(mapChunkEntries+10) != 0 || m.get(3*mapChunkEntries) != 0 {
		t.Fatal("growing lost or invented entries")
	}
	m.set(3*mapChunkEntries, 7)
	if m.get(3*mapChunkEntries) != 7 {
		t.Fatal("the new last LBA does not take an entry")
	}
	if data, _ := m.snapshotChunk(1, nil); len(data) != 8*mapChunkEntries {
		t.Fatalf("snapshot of a chunk made whole by growing: %d bytes", len(data))
	}
	m.grow(10)
	if m.len() != 3*mapChunkEntries+1 {
		t.Fatalf("grow to fewer blocks shrank the map to %d", m.len())
	}
	n := newLBAMap(m.len())
	if err := n.loadChunk(1, short); err != nil || n.get(mapChunkEntries+9) != 6 || n.get(mapChunkEntries+10) != 0 {
		t.Fatalf("loading a chunk checkpointed before the growth: %v", err)
	}
}

func TestOverlayOrdering(t *testing.T) {
	var writes, fresh atomicCounter
	o := newOverlay(newLBAMap(1000), &writes.Int64, &fresh.Int64)
	o.addWrite(5, 10, 2) // seq 5: blocks 10, 11
	o.addWrite(3, 11, 1) // older: ignored for 11
	if ref, ok := o.lookup(11); !ok || ref.seq != 5 || ref.index != 1 {
		t.Fatalf("lookup(11) = %+v %v", ref, ok)
	}
	o.addTrim(7, 0, 100) // long trim: a range, drops older writes
	if ref, ok := o.lookup(10); !ok || ref.index != zeroIndex {
		t.Fatalf("after a long trim, lookup(10) = %+v %v", ref, ok)
	}
	o.addWrite(6, 20, 1) // older than the trim that covers it: ignored
	if ref, _ := o.lookup(20); ref.index != zeroIndex {
		t.Fatalf("write older than a covering trim shows: %+v", ref)
	}
	o.addWrite(8, 20, 1)
	if !o.current(20, 8, 0, 8) || o.current(10, 5, 0, 8) {
		t.Fatal("current is wrong")
	}
	if !o.current(10, 5, 0, 6) {
		t.Fatal("a block overwritten only by a record not yet published is not current")
	}
	if writes.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("pending writes %d (fresh %d), want 1 (1)", writes.Load(), fresh.Load())
	}
	o.destagedAll([]summaryEntry{{kind: kindUnmap, vol: 1, lba: 0, sum: 100}, {kind: kindWrite, vol: 1, lba: 20}},
		[]cache.Seq{7, 8})
	if _, ok := o.lookup(10); ok || o.size.Load() != 0 || writes.Load() != 0 || fresh.Load() != 0 {
		t.Fatalf("after destage: size %d, writes %d", o.size.Load(), writes.Load())
	}
}

func TestPublisherWatermark(t *testing.T) {
	var p publisher
	p.reset(5)
	p.publish(7)
	p.publish(6)
	if p.published() != 4 {
		t.Fatalf("watermark %d before 5 is published", p.published())
	}
	p.publish(5)
	if p.published() != 7 {
		t.Fatalf("watermark %d, want 7", p.published())
	}
}

func TestShapes(t *testing.T) {
	for _, c := range []struct{ data, parity, chunk, summaryBlocks int }{
		{3, 1, 16 << 10, 1}, {3, 1, 128 << 10, 1}, {8, 2, 128 << 10, 2}, {1, 0, 16 << 10, 1},
	} {
		sh, err := newShape(c.data, c.parity, c.chunk)
		if err != nil {
			t.Fatal(err)
		}
		if sh.summaryBlocks != c.summaryBlocks || sh.entryCap < sh.slots+minUnmapRoom {
			t.Errorf("%d+%d x %d: %d summary blocks, %d entries for %d slots", c.data, c.parity, c.chunk,
				sh.summaryBlocks, sh.entryCap, sh.slots)
		}
		for q := range sh.slots {
			chunk, block := sh.locate(q)
			if chunk >= c.data || block < sh.summaryBlocks || block >= sh.chunkBlocks {
				t.Fatalf("slot %d at chunk %d block %d", q, chunk, block)
			}
		}
	}
}

type atomicCounter struct{ atomic.Int64 }
