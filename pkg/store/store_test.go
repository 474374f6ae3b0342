package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

var ctx = context.Background()

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	o := Options{ChunkSize: 1000, SegmentStripes: -1, BatchStripes: -1, FlushStripes: 3, BufferHighWater: 2,
		GCReserveSegments: -1}
	err := o.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Validate = %v, want ErrInvalidOptions", err)
	}
	for _, want := range []string{"no drives", "no write-buffer", "MetaDir", "SegmentStripes", "BatchStripes",
		"FlushStripes", "BufferHighWater", "GCReserveSegments", "chunk size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Drives: make([]disk.Drive, 4)}
	o.EnsureDefaults()
	if o.Data != 3 || o.Parity != 1 || o.ChunkSize != DefaultChunkSize || o.FlushStripes != 4 || o.Clock == nil ||
		o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if p, err := ParseGCPolicy("greedy"); err != nil || p != GCGreedy {
		t.Fatalf("ParseGCPolicy: %v %v", p, err)
	}
	if _, err := ParseGCPolicy("lru"); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("ParseGCPolicy(lru): %v", err)
	}
}

func TestWriteReadTrimAcrossDestageAndReopen(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.CreateVolume("a", 1<<20); !errors.Is(err, ErrVolumeExists) {
		t.Fatalf("second CreateVolume: %v", err)
	}
	if _, err := r.s.EnsureVolume("a", 2<<20); !errors.Is(err, ErrVolumeExists) {
		t.Fatalf("EnsureVolume with another size: %v", err)
	}
	if h, err := r.s.EnsureVolume("b", 2<<20); err != nil || h.Size() != 2<<20 {
		t.Fatalf("EnsureVolume of a new volume: %v", err)
	}
	writeTags(t, v, 0, 1, 2, 3)
	writeTags(t, v, 10, 4)
	writeTags(t, v, 1, 5) // overwrite while buffered
	check := func(when string) {
		t.Helper()
		got := readTags(t, v, 0, 12)
		want := []uint64{1, 5, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: read %v, want %v", when, got, want)
		}
	}
	check("buffered")
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("destaged")
	if st := r.s.Stats(); st.UsedBytes != 4*BlockSize || st.BufferRecords != 0 {
		t.Fatalf("after flush: used %d, buffered records %d", st.UsedBytes, st.BufferRecords)
	}
	if err := v.Trim(ctx, 2*BlockSize, 2*BlockSize); err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, v, 2, 1); got[0] != 0 {
		t.Fatalf("trimmed block reads %d", got[0])
	}
	r.reopen()
	v, err = r.s.Volume("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, v, 0, 12); !slices.Equal(got, []uint64{1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0}) {
		t.Fatalf("after reopen: %v", got)
	}
	if used := v.UsedBytes(); used != 3*BlockSize {
		t.Fatalf("UsedBytes = %d, want 3 blocks", used)
	}
}

func TestVolumeErrors(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 64*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, BlockSize)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"misaligned offset", v.WriteAt(ctx, buf, 100, 0), backend.ErrMisaligned},
		{"misaligned length", v.ReadAt(ctx, buf[:100], 0), backend.ErrMisaligned},
		{"beyond the end", v.WriteAt(ctx, buf, 64*BlockSize, 0), backend.ErrOutOfRange},
		{"trim beyond the end", v.Trim(ctx, 63*BlockSize, 2*BlockSize), backend.ErrOutOfRange},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := r.s.CreateVolume("bad", 1000); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("CreateVolume of 1000 bytes: %v", err)
	}
	if _, err := r.s.Volume("nope"); !errors.Is(err, ErrNoVolume) {
		t.Errorf("Volume(nope): %v", err)
	}
	if err := r.s.DeleteVolume("a"); err != nil {
		t.Fatal(err)
	}
	if err := v.ReadAt(ctx, buf, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("read of a deleted volume: %v", err)
	}
	h, _ := r.s.CreateVolume("b", 64*BlockSize)
	if h.ID() <= v.ID() {
		t.Errorf("volume ID %v reused after %v", h.ID(), v.ID())
	}
	_ = h.Close()
	if err := h.WriteAt(ctx, buf, 0, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("write on a closed handle: %v", err)
	}
}

func TestDeleteVolumeFreesSpaceAndSurvivesRestart(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	a, _ := r.s.CreateVolume("a", 1<<20)
	b, _ := r.s.CreateVolume("b", 1<<20)
	for i := range 40 {
		writeTags(t, a, uint64(i), uint64(100+i))
		writeTags(t, b, uint64(i), uint64(200+i))
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.s.DeleteVolume("a"); err != nil {
		t.Fatal(err)
	}
	if used := r.s.Stats().UsedBytes; used != 40*BlockSize {
		t.Fatalf("used %d bytes after delete, want 40 blocks", used)
	}
	r.reopen()
	if _, err := r.s.Volume("a"); !errors.Is(err, ErrNoVolume) {
		t.Fatalf("deleted volume back after restart: %v", err)
	}
	b, _ = r.s.Volume("b")
	if got := readTags(t, b, 39, 1); got[0] != 239 {
		t.Fatalf("b block 39 = %d", got[0])
	}
	a, _ = r.s.CreateVolume("a", 1<<20)
	if got := readTags(t, a, 0, 4); !slices.Equal(got, []uint64{0, 0, 0, 0}) {
		t.Fatalf("new volume a shows old data: %v", got)
	}
}

func TestLargeWritesSpanRecordsAndStripes(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, _ := r.s.CreateVolume("a", 1<<20)
	tags := make([]uint64, 100) // more than a record holds (31 blocks) and several stripes
	for i := range tags {
		tags[i] = uint64(1000 + i)
	}
	writeTags(t, v, 7, tags...)
	if got := readTags(t, v, 7, 100); !slices.Equal(got, tags) {
		t.Fatal("buffered large write reads back wrong")
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, v, 7, 100); !slices.Equal(got, tags) {
		t.Fatal("destaged large write reads back wrong")
	}
	if err := v.Trim(ctx, 0, 1<<20); err != nil { // a long trim: a range in the overlay
		t.Fatal(err)
	}
	writeTags(t, v, 50, 7)
	got := readTags(t, v, 48, 4)
	if !slices.Equal(got, []uint64{0, 0, 7, 0}) {
		t.Fatalf("after a long trim and a write: %v", got)
	}
	r.reopen()
	v, _ = r.s.Volume("a")
	if got := readTags(t, v, 48, 4); !slices.Equal(got, []uint64{0, 0, 7, 0}) {
		t.Fatalf("after reopen: %v", got)
	}
}

func TestOpenRefusesForeignDrives(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.crashable = true
	r := newRig(t, cfg)
	_ = r.s.Close()
	r.s = nil
	db, err := meta.Open(meta.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var drives []disk.Drive
	for _, m := range r.mem {
		drives = append(drives, m.CrashClone(0, 0))
	}
	_, err = Open(Options{Drives: drives, Buffer: pmem.NewFake(256<<10, 1), Meta: db, ChunkSize: 16 << 10,
		SegmentStripes: 4})
	if !errors.Is(err, ErrForeignDrive) {
		t.Fatalf("Open with formatted drives and empty metadata: %v", err)
	}
}

func TestOpenTooSmall(t *testing.T) {
	db, _ := meta.Open(meta.Options{InMemory: true})
	defer db.Close()
	drives := []disk.Drive{disk.NewMem(2 << 20), disk.NewMem(2 << 20)}
	_, err := Open(Options{Drives: drives, Buffer: pmem.NewFake(256<<10, 1), Meta: db})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Open on tiny drives: %v", err)
	}
}

func TestNoSpace(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.driveSize = 2 << 20
	r := newRig(t, cfg)
	capacity := r.s.Stats().CapacityBytes / BlockSize
	v, _ := r.s.CreateVolume("big", 64<<20) // thin: larger than the store
	var err error
	for i := uint64(0); i < uint64(capacity)+10 && err == nil; i++ {
		buf := make([]byte, BlockSize)
		makeBlock(buf, i+1)
		err = v.WriteAt(ctx, buf, int64(i)*BlockSize, 0)
	}
	if !errors.Is(err, backend.ErrNoSpace) {
		t.Fatalf("writing past capacity %d: %v", capacity, err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 3, 77) // an overwrite of a mapped block is still taken
	// Trims still work, and trimming makes room.
	if err := v.Trim(ctx, 0, 64*BlockSize); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 0, 1)
}

// TestGeometries runs one workload over several geometries (metamorphic:
// every configuration must read back the same), then loses as many drives
// as each has parity and reads everything again.
func TestGeometries(t *testing.T) {
	cases := []struct {
		name                 string
		drives, data, parity int
		chunk                int
	}{
		{"1+0", 1, 0, 0, 16 << 10},
		{"2+1", 3, 0, 0, 16 << 10},
		{"3+2", 5, 0, 2, 32 << 10},
		{"3+1 over 6 drives", 6, 3, 1, 16 << 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultRigConfig()
			cfg.drives, cfg.faults = c.drives, true
			cfg.opts.Data, cfg.opts.Parity, cfg.opts.ChunkSize = c.data, c.parity, c.chunk
			r := newRig(t, cfg)
			v, err := r.s.CreateVolume("a", 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, 256)
			rng := rand.New(rand.NewPCG(7, 7))
			for i := range 600 {
				lba := rng.IntN(250)
				n := 1 + rng.IntN(6)
				tags := make([]uint64, n)
				for k := range tags {
					tags[k] = uint64(i*8 + k + 1)
				}
				writeTags(t, v, uint64(lba), tags...)
				copy(want[lba:], tags)
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			r.reopen()
			v, _ = r.s.Volume("a")
			checkAll(t, v, want)
			for d := range r.s.Stats().Geometry.Parity {
				r.fault[d].Fail()
			}
			checkAll(t, v, want)
		})
	}
}
