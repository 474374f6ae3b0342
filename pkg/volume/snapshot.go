package volume

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// The snapshot stream (doc.go, "Snapshot stream"): a 32-byte header, then
// runs that cover the volume in order, data or zeroes, then an end run
// carrying the CRC32C of everything before it.
const (
	snapMagic      = "BSLTVSNP"
	snapVersion    = 1
	snapHeaderSize = 32
	snapRunSize    = 24
	snapExtent     = 1 << 20 // bytes read from the replica at a time

	runData   uint8 = 1
	runZeroes uint8 = 2
	runEnd    uint8 = 3
)

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot implements replication.StateMachine: it streams the local replica, reading
// it an extent at a time; all-zero blocks travel as zero runs.
func (v *Volume) Snapshot(w io.Writer) error {
	sw := &snapshotWriter{w: w, crc: crc32.New(castagnoliTable)}
	size := v.Size() // the size when the stream starts: header, runs and end agree on it
	head := make([]byte, snapHeaderSize)
	copy(head, snapMagic)
	binary.LittleEndian.PutUint16(head[8:], snapVersion)
	binary.LittleEndian.PutUint32(head[12:], uint32(v.blockSize))
	binary.LittleEndian.PutUint64(head[16:], uint64(size))
	if err := sw.write(head); err != nil {
		return err
	}
	buf := make([]byte, min(int64(snapExtent), size))
	ctx := context.Background()
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		if err := v.local.ReadAt(ctx, buf[:n], off); err != nil {
			return fmt.Errorf("volume: reading the replica for a snapshot at %d: %w", off, err)
		}
		if err := sw.extent(buf[:n], off, v.blockSize); err != nil {
			return err
		}
		off += n
	}
	return sw.end(size)
}

// end flushes the zero run in progress and writes the end run: the CRC32C
// of everything before it and the volume's size.
func (s *snapshotWriter) end(size int64) error {
	if err := s.flushZeroes(); err != nil {
		return err
	}
	end := make([]byte, snapRunSize)
	end[0] = runEnd
	binary.LittleEndian.PutUint64(end[8:], uint64(s.crc.Sum32()))
	binary.LittleEndian.PutUint64(end[16:], uint64(size))
	_, err := s.w.Write(end)
	return err
}

// snapshotWriter emits runs, coalescing zero blocks across extents.
type snapshotWriter struct {
	w         io.Writer
	crc       hash.Hash32
	zeroStart int64
	zeroLen   int64
}

func (s *snapshotWriter) write(b []byte) error {
	s.crc.Write(b)
	_, err := s.w.Write(b)
	return err
}

func (s *snapshotWriter) run(kind uint8, off, n int64) error {
	h := make([]byte, snapRunSize)
	h[0] = kind
	binary.LittleEndian.PutUint64(h[8:], uint64(off))
	binary.LittleEndian.PutUint64(h[16:], uint64(n))
	return s.write(h)
}

// extent emits the runs of one extent read at off.
func (s *snapshotWriter) extent(b []byte, off int64, blockSize int) error {
	dataStart := -1
	for i := 0; i < len(b); i += blockSize {
		zero := isZero(b[i : i+blockSize])
		switch {
		case zero && dataStart >= 0:
			if err := s.data(b[dataStart:i], off+int64(dataStart)); err != nil {
				return err
			}
			dataStart = -1
		case !zero && dataStart < 0:
			if err := s.flushZeroes(); err != nil {
				return err
			}
			dataStart = i
		}
		if zero {
			if s.zeroLen == 0 {
				s.zeroStart = off + int64(i)
			}
			s.zeroLen += int64(blockSize)
		}
	}
	if dataStart >= 0 {
		return s.data(b[dataStart:], off+int64(dataStart))
	}
	return nil
}

func (s *snapshotWriter) data(b []byte, off int64) error {
	if err := s.run(runData, off, int64(len(b))); err != nil {
		return err
	}
	return s.write(b)
}

func (s *snapshotWriter) flushZeroes() error {
	if s.zeroLen == 0 {
		return nil
	}
	err := s.run(runZeroes, s.zeroStart, s.zeroLen)
	s.zeroLen = 0
	return err
}

var zeroBlock = make([]byte, 4096)

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// Restore implements replication.StateMachine: it reads a whole snapshot
// or a delta (delta.go), checks the stream's geometry against the replica,
// writes every run (zero runs as WriteZeroes), checks the CRC and, for a
// whole snapshot, that the runs covered the volume, and flushes the
// replica. On error the replica is left partly restored
// (replication.StateMachine explains why that is safe).
func (v *Volume) Restore(r io.Reader, index uint64) error {
	v.peer.applying.Store(max(v.peer.applying.Load(), index)) // peer.go: it may reflect index from now on
	crc := crc32.New(castagnoliTable)
	tr := io.TeeReader(r, crc)
	head := make([]byte, snapHeaderSize)
	if _, err := io.ReadFull(tr, head); err != nil {
		return fmt.Errorf("volume: snapshot header: %w", err)
	}
	if string(head[:8]) == snapMagic && binary.LittleEndian.Uint16(head[8:]) == deltaVersion {
		return v.restoreDelta(tr, crc.Sum32, head, index)
	}
	if err := v.checkSnapshotHeader(head); err != nil {
		return err
	}
	if err := v.restoreRuns(tr, crc.Sum32, false); err != nil {
		return err
	}
	return v.finishRestore(index)
}

// restoreRuns writes the runs read from tr up to the end run, whose CRC it
// checks against crc (the sum of everything read before it). Runs are in
// order; with gaps they may leave ranges out (a delta), else they must
// cover the volume.
func (v *Volume) restoreRuns(tr io.Reader, crc func() uint32, gaps bool) error {
	ctx := context.Background()
	buf := make([]byte, 0, snapExtent)
	run := make([]byte, snapRunSize)
	for next := int64(0); ; {
		sum := crc()
		if _, err := io.ReadFull(tr, run); err != nil {
			return fmt.Errorf("volume: snapshot run at %d: %w", next, err)
		}
		kind, off, n := run[0], int64(binary.LittleEndian.Uint64(run[8:])), int64(binary.LittleEndian.Uint64(run[16:]))
		if kind == runEnd {
			if size := v.Size(); uint32(off) != sum || off>>32 != 0 || n != size || (!gaps && next != size) {
				return fmt.Errorf("%w: snapshot ends at %d of %d bytes, or its checksum is wrong", ErrCorrupt, next, size)
			}
			return nil
		}
		if gaps && off > next {
			next = off
		}
		if err := v.checkRun(run, off, n, next); err != nil {
			return err
		}
		if err := v.restoreRun(ctx, tr, kind, off, n, buf); err != nil {
			return err
		}
		next = off + n
	}
}

// finishRestore makes a restored replica durable and records it as
// holding every entry up to index; the change log starts again there.
func (v *Volume) finishRestore(index uint64) error {
	if err := v.local.Flush(context.Background()); err != nil {
		return fmt.Errorf("volume: flushing the restored replica: %w", err)
	}
	v.applied.Store(index)
	v.durable.Store(index)
	v.changes.reset(index)
	v.warnRestoredSnapshots(index)
	return nil
}

func (v *Volume) checkSnapshotHeader(h []byte) error {
	if string(h[:8]) != snapMagic || binary.LittleEndian.Uint16(h[8:]) != snapVersion {
		return fmt.Errorf("%w: not a volume snapshot (version %d)", ErrCorrupt, binary.LittleEndian.Uint16(h[8:]))
	}
	return v.checkGeometry(h)
}

// checkGeometry checks a snapshot header's block and volume size against
// the replica's.
func (v *Volume) checkGeometry(h []byte) error {
	bs, size := int(binary.LittleEndian.Uint32(h[12:])), int64(binary.LittleEndian.Uint64(h[16:]))
	if bs != v.blockSize || size != v.Size() {
		return fmt.Errorf("%w: snapshot of %d bytes in %d-byte blocks, replica has %d in %d", ErrCorrupt,
			size, bs, v.Size(), v.blockSize)
	}
	return nil
}

// checkRun checks that a run continues the previous one and fits.
func (v *Volume) checkRun(run []byte, off, n, next int64) error {
	bs := int64(v.blockSize)
	kind := run[0]
	switch {
	case kind != runData && kind != runZeroes, !isZero(run[1:8]):
		return fmt.Errorf("%w: snapshot run of kind %d", ErrCorrupt, kind)
	case off != next || off%bs != 0 || n <= 0 || n%bs != 0 || n > v.Size()-off:
		return fmt.Errorf("%w: snapshot run [%d, +%d) does not continue at %d", ErrCorrupt, off, n, next)
	case kind == runData && n > snapExtent:
		return fmt.Errorf("%w: snapshot data run of %d bytes", ErrCorrupt, n)
	}
	return nil
}

func (v *Volume) restoreRun(ctx context.Context, r io.Reader, kind uint8, off, n int64, buf []byte) error {
	var err error
	if kind == runZeroes {
		err = v.local.WriteZeroes(ctx, off, n)
	} else {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("volume: snapshot data at %d: %w", off, err)
		}
		err = v.local.WriteAt(ctx, buf, off, 0)
	}
	if err != nil {
		return fmt.Errorf("volume: restoring [%d, +%d): %w", off, n, err)
	}
	return nil
}
