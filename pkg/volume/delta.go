package volume

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	"basalt/replication"
)

// Delta snapshots (doc.go, "Delta snapshot stream"): a follower that still
// holds its replica as of an applied index gets only the ranges that
// entries after it changed, read from the leader's replica as they are
// now. Trimmed and zeroed ranges are changes like writes: they read as
// zeroes, travel as zero runs, and the receiver zeroes them (WriteZeroes),
// so whatever was trimmed meanwhile is deleted there too, with no map of
// mapped blocks on the wire. A base older than the change log's precise
// records is answered by extent (generations.go): every extent an entry
// after the base changed, whole.
const (
	deltaVersion    = 2
	deltaHeaderSize = 40
)

var _ replication.DeltaSnapshotter = (*Volume)(nil)

// defaultIdentity names a group's replicas when the caller set none:
// group IDs are not reused within a cluster.
func defaultIdentity(id replication.GroupID) []byte {
	return []byte("basalt-volume-group:" + strconv.FormatUint(uint64(id), 10))
}

// SetSnapshotIdentity sets the identity this replica announces and checks
// when it receives a delta snapshot (replication.DeltaSnapshotter), such
// as the volume's UUID: every replica of the volume must be given the same
// one. By default it is derived from the group's ID. nil: no deltas to or
// from this replica. Safe at any time; a stream in flight keeps the old one.
func (v *Volume) SetSnapshotIdentity(id []byte) {
	id = bytes.Clone(id)
	v.identity.Store(&id)
}

// SnapshotIdentity implements replication.DeltaSnapshotter.
func (v *Volume) SnapshotIdentity() []byte {
	if p := v.identity.Load(); p != nil {
		return *p
	}
	return nil
}

// SetChangeLimit sets how many change records the Volume keeps for delta
// snapshots (default 65,536; each covers a write, trim or zeroing, or a run
// of them that continue one another). A base older than the records still
// gets a delta, of whole extents (generations.go, at most 2 MiB per
// volume). 0 turns deltas off, extents included: every snapshot streams the
// whole volume.
func (v *Volume) SetChangeLimit(n int) { v.changes.setLimit(n) }

// SnapshotSince implements replication.DeltaSnapshotter: it streams the
// ranges entries after base.Applied changed (by the change log's records
// when they reach back to it, else every extent changed since, whole), or
// returns replication.ErrNoDelta before writing when base is another
// replica's or older than the change log's start (this process's first
// applied entry, or its last restore).
func (v *Volume) SnapshotSince(w io.Writer, base replication.SnapshotBase) error {
	id := v.SnapshotIdentity()
	if len(id) == 0 || !bytes.Equal(id, base.Identity) {
		return fmt.Errorf("%w: the receiver's replica identity is not this one's", replication.ErrNoDelta)
	}
	ranges, ok := v.changes.since(base.Applied)
	if !ok {
		ranges, ok = v.changes.extentsSince(base.Applied)
	}
	if !ok {
		return fmt.Errorf("%w: no change record or extent generation reaches back to index %d", replication.ErrNoDelta, base.Applied)
	}
	size := v.Size()
	var data int64
	for _, r := range ranges {
		data += min(r.end, size) - min(r.off, size)
	}
	if sz, ok := w.(replication.SnapshotSizer); ok {
		sz.ExpectBytes(deltaHeaderSize + int64(len(id)) + data + int64(len(ranges)+1)*snapRunSize)
	}
	sw := &snapshotWriter{w: w, crc: crc32.New(castagnoliTable)}
	head := make([]byte, deltaHeaderSize, deltaHeaderSize+len(id))
	copy(head, snapMagic)
	binary.LittleEndian.PutUint16(head[8:], deltaVersion)
	binary.LittleEndian.PutUint32(head[12:], uint32(v.blockSize))
	binary.LittleEndian.PutUint64(head[16:], uint64(size))
	binary.LittleEndian.PutUint64(head[24:], base.Applied)
	binary.LittleEndian.PutUint32(head[32:], uint32(len(id)))
	if err := sw.write(append(head, id...)); err != nil {
		return err
	}
	if err := v.streamRanges(sw, ranges, size); err != nil {
		return err
	}
	return sw.end(size)
}

// streamRanges writes the runs of each range, as the replica holds it now,
// clipped to size.
func (v *Volume) streamRanges(sw *snapshotWriter, ranges []extent, size int64) error {
	buf := make([]byte, snapExtent)
	ctx := context.Background()
	for _, r := range ranges {
		for off := r.off; off < min(r.end, size); {
			n := min(int64(len(buf)), min(r.end, size)-off)
			if err := v.local.ReadAt(ctx, buf[:n], off); err != nil {
				return fmt.Errorf("volume: reading the replica for a delta snapshot at %d: %w", off, err)
			}
			if err := sw.extent(buf[:n], off, v.blockSize); err != nil {
				return err
			}
			off += n
		}
		if err := sw.flushZeroes(); err != nil { // zero runs never span a gap
			return err
		}
	}
	return nil
}

// restoreDelta is Restore of a delta stream whose first snapHeaderSize
// bytes, head, were read through tr: it checks the geometry and that the
// delta is for this replica, writes every run, checks the CRC, flushes.
func (v *Volume) restoreDelta(tr io.Reader, crc func() uint32, head []byte, index uint64) error {
	rest := make([]byte, deltaHeaderSize-snapHeaderSize)
	if _, err := io.ReadFull(tr, rest); err != nil {
		return fmt.Errorf("volume: delta snapshot header: %w", err)
	}
	head = append(head, rest...)
	if err := v.checkGeometry(head); err != nil {
		return err
	}
	base, idLen := binary.LittleEndian.Uint64(head[24:]), binary.LittleEndian.Uint32(head[32:])
	if idLen == 0 || idLen > 256 || !isZero(head[10:12]) || !isZero(head[36:40]) || base >= index {
		return fmt.Errorf("%w: delta snapshot header (base %d for index %d, identity of %d bytes)", ErrCorrupt, base, index, idLen)
	}
	id := make([]byte, idLen)
	if _, err := io.ReadFull(tr, id); err != nil {
		return fmt.Errorf("volume: delta snapshot identity: %w", err)
	}
	if !bytes.Equal(id, v.SnapshotIdentity()) {
		return fmt.Errorf("%w: a delta snapshot for replica %q reached replica %q", ErrCorrupt, id, v.SnapshotIdentity())
	}
	if err := v.restoreRuns(tr, crc, true); err != nil {
		return err
	}
	return v.finishRestore(index)
}
