package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/compress"
	"basalt/pkg/meta"
)

// volume is a volume's shared state; Volume is a handle on it.
//
// info is fixed at open or creation, except info.Size: size is the current
// size, which ResizeVolume raises after the map has grown to cover it.
type volume struct {
	info    meta.VolumeInfo
	size    atomic.Int64 // bytes; <= blocks()*BlockSize
	lmap    *lbaMap
	ov      *overlay
	mapped  atomic.Int64 // mapped map entries
	deleted atomic.Bool
	staged  stagedState                // StageByReference: the volume's staged records and floor
	cipher  atomic.Pointer[slotCipher] // an encrypted volume's, once its key is set (cipher.go)
	fam     *family                    // the volumes it shares blocks with (snapshot.go)
	// compression is how the writer packs the volume's blocks;
	// logicalBytes and storedBytes sum the host blocks it packed and the
	// data slots they took, in bytes (compress.go, countPacked).
	compression               compress.Algorithm
	logicalBytes, storedBytes atomic.Int64
}

func (s *Store) newVolume(info meta.VolumeInfo) *volume {
	lmap := newLBAMap(uint64(info.Size) / BlockSize)
	v := &volume{info: info, lmap: lmap, ov: newOverlay(lmap, &s.counters.pendingWrites, &s.counters.pendingFresh)}
	v.size.Store(info.Size)
	v.compression, _ = compress.ParseAlgorithm(info.Compression) // checked at creation
	v.fam = &family{members: []*volume{v}}
	return v
}

// blocks returns the number of LBAs the volume's map covers: the size in
// blocks, or more while a growth is under way.
func (v *volume) blocks() uint64 { return v.lmap.len() }

// current returns the volume's record with its current size.
func (v *volume) current() meta.VolumeInfo {
	info := v.info
	info.Size = v.size.Load()
	return info
}

// volumeByID returns a live volume, or nil.
func (s *Store) volumeByID(id meta.VolumeID) *volume {
	if m := s.byID.Load(); m != nil {
		return (*m)[id]
	}
	return nil
}

// publishVolumesLocked rebuilds the ID index from byName. s.vols held.
func (s *Store) publishVolumesLocked() {
	m := make(map[meta.VolumeID]*volume, len(s.vols.byName))
	for _, v := range s.vols.byName {
		m[v.info.ID] = v
	}
	s.byID.Store(&m)
}

func (s *Store) volumeList() []*volume {
	m := s.byID.Load()
	if m == nil {
		return nil
	}
	vols := slices.Collect(maps.Values(*m))
	slices.SortFunc(vols, func(a, b *volume) int { return int(a.info.ID) - int(b.info.ID) })
	return vols
}

// Volumes describes the writable volumes (clones among them), in ID order.
func (s *Store) Volumes() []meta.VolumeInfo {
	var out []meta.VolumeInfo
	for _, v := range s.volumeList() {
		if v.info.SnapshotOf != 0 {
			continue // Snapshots lists them
		}
		out = append(out, v.current())
	}
	return out
}

// CreateVolume creates a thin volume of size bytes (a positive multiple of
// BlockSize, fewer than 2^40 blocks) and returns a handle on it. The volume uses no space until
// written. It returns an error wrapping ErrVolumeExists if name is taken.
func (s *Store) CreateVolume(name string, size int64) (*Volume, error) {
	return s.CreateVolumeWith(name, size, VolumeOptions{})
}

// CreateVolumeWith is CreateVolume with the volume's options (compression,
// encryption; not both: ErrInvalidOptions).
func (s *Store) CreateVolumeWith(name string, size int64, o VolumeOptions) (*Volume, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if name == "" || strings.Contains(name, SnapshotSep) || size <= 0 || size%BlockSize != 0 ||
		size/BlockSize >= maxVolumeBlocks || !o.Compression.Valid() {
		return nil, fmt.Errorf("%w: volume %q of %d bytes", ErrInvalidOptions, name, size)
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	if _, ok := s.vols.byName[name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrVolumeExists, name)
	}
	info := meta.VolumeInfo{ID: s.vols.nextID, Name: name, Size: size, BlockSize: BlockSize, Encryption: o.Encryption}
	if o.Key != nil {
		info.KeyCheck = keyCheck(o.Key)
	}
	if o.Compression != compress.None {
		info.Compression = o.Compression.String()
	}
	if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutVolume(info) }); err != nil {
		return nil, fmt.Errorf("store: while creating volume %q: %w", name, err)
	}
	s.vols.nextID++
	v := s.newVolume(info)
	if err := v.applyKey(o); err != nil {
		return nil, err // o.check accepted the key: not reached
	}
	s.vols.byName[name] = v
	s.publishVolumesLocked()
	s.log.Info("volume created", "volume", name, "id", info.ID, "size", size, "encryption", o.Encryption)
	return &Volume{s: s, v: v}, nil
}

// EnsureVolume returns a handle on the named volume, creating it (thin) if
// it does not exist. An existing volume of another size is an error
// wrapping ErrVolumeExists. This is what a node's configuration maps a
// namespace to.
func (s *Store) EnsureVolume(name string, size int64) (*Volume, error) {
	v, err := s.Volume(name)
	if errors.Is(err, ErrNoVolume) {
		v, err = s.CreateVolume(name, size)
	}
	if err != nil {
		return nil, err
	}
	if v.Size() != size {
		return nil, fmt.Errorf("%w: %q has %d bytes, not %d", ErrVolumeExists, name, v.Size(), size)
	}
	return v, nil
}

// Volume returns a new handle on the named volume, or an error wrapping
// ErrNoVolume.
func (s *Store) Volume(name string) (*Volume, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	v, ok := s.vols.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoVolume, name)
	}
	return &Volume{s: s, v: v}, nil
}

// DeleteVolume deletes the named volume and frees its space. Handles on it
// fail with backend.ErrClosed from then on. With StageByReference, once it
// returns the store never reads the caller's staged bytes of the volume
// again.
func (s *Store) DeleteVolume(name string) error {
	if err := s.usable(); err != nil {
		return err
	}
	s.vols.Lock()
	v, ok := s.vols.byName[name]
	if !ok {
		s.vols.Unlock()
		return fmt.Errorf("%w: %q", ErrNoVolume, name)
	}
	if err := s.dependentsLocked(v); err != nil {
		s.vols.Unlock()
		return err
	}
	tomb := v.current()
	tomb.Deleted = true
	if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutVolume(tomb) }); err != nil {
		s.vols.Unlock()
		return fmt.Errorf("store: while deleting volume %q: %w", name, err)
	}
	v.deleted.Store(true)
	delete(s.vols.byName, name)
	s.publishVolumesLocked()
	s.vols.Unlock()
	v.ov.clear()
	s.log.Info("volume deleted", "volume", name, "id", v.info.ID)
	err := s.call(context.Background(), command{kind: cmdDropVolume, vol: v})
	if s.ring != nil {
		// The writer, past the command, packs none of the volume's records;
		// after drop no reader holds the caller's bytes either.
		s.ring.drop(v)
	}
	return err
}

// Volume is a handle on a volume; it implements backend.Backend with 4096-
// byte blocks. Writes are acknowledged once persisted in the write buffer;
// Flush and FUA are free unless the buffer's region is volatile, in which
// case they destage to the drives first.
type Volume struct {
	s      *Store
	v      *volume
	closed atomic.Bool
}

var _ backend.Backend = (*Volume)(nil)

// ID returns the volume's ID.
func (h *Volume) ID() meta.VolumeID { return h.v.info.ID }

// Name returns the volume's name.
func (h *Volume) Name() string { return h.v.info.Name }

// Size returns the capacity in bytes: the volume's current size, which
// ResizeVolume may raise at any time (never lower).
func (h *Volume) Size() int64 { return h.v.size.Load() }

// BlockSize returns 4096.
func (h *Volume) BlockSize() int { return BlockSize }

// UsedBytes returns the bytes the volume's mapped blocks take (thin
// provisioning: blocks never written or trimmed take none), not counting
// blocks only in the write buffer.
func (h *Volume) UsedBytes() int64 { return h.v.mapped.Load() * BlockSize }

// Close invalidates the handle; the volume and the store stay open.
func (h *Volume) Close() error {
	if h.closed.Swap(true) {
		return backend.ErrClosed
	}
	return nil
}

// check validates an operation of n bytes at off and returns its first LBA
// and block count.
func (h *Volume) check(off, n int64) (uint64, int, error) {
	if h.closed.Load() || h.v.deleted.Load() {
		return 0, 0, backend.ErrClosed
	}
	if err := h.s.usable(); err != nil {
		return 0, 0, err
	}
	if err := h.v.keyErr(); err != nil {
		return 0, 0, err
	}
	if off%BlockSize != 0 || n%BlockSize != 0 {
		return 0, 0, fmt.Errorf("%w: %d bytes at %d", backend.ErrMisaligned, n, off)
	}
	if size := h.v.size.Load(); off < 0 || n < 0 || off > size || n > size-off {
		return 0, 0, fmt.Errorf("%w: %d bytes at %d of %d", backend.ErrOutOfRange, n, off, size)
	}
	return uint64(off / BlockSize), int(n / BlockSize), nil
}

// WriteAt appends p to the write buffer, in records of at most
// maxRecordBlocks blocks, and returns once they are persisted. It fails
// with backend.ErrNoSpace when the store has no room for more data, and
// backend.ErrWriteFault when the write buffer or the store has failed.
// With StageByReference it stages a copy of p instead (writeCopy), which
// is durable only once destaged: Flush, or FUA in flags.
func (h *Volume) WriteAt(ctx context.Context, p []byte, off int64, flags backend.WriteFlags) error {
	lba, n, err := h.check(off, int64(len(p)))
	if err != nil || n == 0 {
		return err
	}
	if err := h.writable(); err != nil {
		return err
	}
	s := h.s
	if err := s.admit(h.v, lba, n); err != nil {
		return err
	}
	if s.ring != nil {
		if err := s.writeCopy(h.v, p, lba, n); err != nil {
			return err
		}
		return h.fua(ctx, flags)
	}
	var hdr [recordHeaderLen]byte
	for n > 0 {
		chunk := min(n, s.maxRecordBlocks())
		encodeRecordHeader(hdr[:], h.v.info.ID, lba, chunk)
		seq, err := s.buf.AppendBlocks(ctx, recordWrite, hdr[:], p[:chunk*BlockSize])
		if err != nil {
			return s.writeError(ctx, err)
		}
		h.v.ov.addWrite(seq, lba, chunk)
		s.pub.publish(seq)
		s.counters.hostBlocks.Add(uint64(chunk))
		s.wake() // after every record: the next one may wait for the space destaging frees
		lba, n, p = lba+uint64(chunk), n-chunk, p[chunk*BlockSize:]
	}
	return h.fua(ctx, flags)
}

// fua makes a completed write durable if flags ask for it.
func (h *Volume) fua(ctx context.Context, flags backend.WriteFlags) error {
	if flags&backend.WriteFUA != 0 {
		return h.s.flush(ctx)
	}
	return nil
}

// writeError classifies an Append failure.
func (s *Store) writeError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case errors.Is(err, cache.ErrClosed):
		return fmt.Errorf("%w: %w", backend.ErrClosed, err)
	}
	return fmt.Errorf("%w: %w", backend.ErrWriteFault, err)
}

// Trim unmaps [off, off+n): later reads return zeros and the space is freed
// once destaged. The unmap is persisted in the write buffer before Trim
// returns, so it survives a crash.
func (h *Volume) Trim(ctx context.Context, off, n int64) error {
	lba, count, err := h.check(off, n)
	if err != nil || count == 0 {
		return err
	}
	if err := h.writable(); err != nil {
		return err
	}
	s := h.s
	if s.ring != nil {
		return s.stageTrim(h.v, lba, uint64(count), 0, false)
	}
	var hdr [recordHeaderLen]byte
	for remaining := uint64(count); remaining > 0; {
		chunk := min(remaining, maxUnmapBlocks)
		encodeRecordHeader(hdr[:], h.v.info.ID, lba, int(chunk))
		seq, err := s.buf.Append(ctx, recordUnmap, hdr[:])
		if err != nil {
			return s.writeError(ctx, err)
		}
		h.v.ov.addTrim(seq, lba, chunk)
		s.pub.publish(seq)
		s.wake()
		lba, remaining = lba+chunk, remaining-chunk
	}
	return nil
}

// WriteZeroes unmaps the range: unmapped blocks read as zeros.
func (h *Volume) WriteZeroes(ctx context.Context, off, n int64) error { return h.Trim(ctx, off, n) }

// Flush makes every completed write durable: a no-op on a durable write
// buffer, a destage to the drives on a volatile one (tmpfs).
func (h *Volume) Flush(ctx context.Context) error {
	if _, _, err := h.check(0, 0); err != nil {
		return err
	}
	return h.s.flush(ctx)
}

// flush destages everything when the staged records do not survive power
// loss (a volatile region, or staging by reference).
func (s *Store) flush(ctx context.Context) error {
	if s.stage.durable() {
		return nil
	}
	return s.call(ctx, command{kind: cmdFlush})
}

// Flush destages everything in the write buffer to the drives (padding the
// last stripe) and returns when it is durable there, whatever the region.
// With StageByReference every record staged before it is then released:
// StagedFloor reports none for a volume written only before Flush.
func (s *Store) Flush(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.call(ctx, command{kind: cmdFlush})
}

// CheckSpace implements backend.SpaceChecker: it reports whether a write of
// n bytes at off would fit with headroom bytes of capacity to spare.
func (h *Volume) CheckSpace(off, n, headroom int64) error {
	lba, count, err := h.check(off, n)
	if err != nil || count == 0 {
		return err
	}
	return h.s.admitWithHeadroom(h.v, lba, count, (headroom+BlockSize-1)/BlockSize)
}

// admit refuses a write of n blocks at lba of v when the mapped blocks, the
// buffered writes to unmapped blocks and the unmapped blocks of this write
// would exceed the usable capacity: a full store still takes overwrites.
func (s *Store) admit(v *volume, lba uint64, n int) error {
	return s.admitWithHeadroom(v, lba, n, 0)
}

// admitWithHeadroom is admit with headroom blocks of the capacity kept free.
func (s *Store) admitWithHeadroom(v *volume, lba uint64, n int, headroom int64) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrWriteFault, err)
	}
	used := s.counters.mappedBlocks.Load() + s.counters.pendingFresh.Load()
	capacity := s.capacityBlocks() - headroom
	if used+int64(n) <= capacity {
		return nil // even if every block is fresh: no need to look them up
	}
	fresh := int64(0)
	for i := range uint64(n) {
		if !v.lmap.get(lba + i).mapped() {
			fresh++
		}
	}
	if fresh > 0 && used+fresh > capacity {
		return fmt.Errorf("%w: %d blocks in use or buffered, capacity %d (%d kept free)",
			backend.ErrNoSpace, used, capacity+headroom, headroom)
	}
	return nil
}

// maxRecordBlocks is the most blocks one write record carries.
func (s *Store) maxRecordBlocks() int {
	return min(256, (s.counters.maxPayload-recordHeaderLen)/(4+BlockSize))
}
