package store

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"basalt/pkg/backend"
)

// TestResizeVolumeGrowsInPlace grows a volume whose map was checkpointed at
// the old size across a map-chunk boundary: the old data stays, the new
// tail takes writes and reads zeros where unwritten, I/O past the new end
// is refused, and the size and data survive a reopen.
func TestResizeVolumeGrowsInPlace(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 100*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 0, 1, 2, 3)
	writeTags(t, v, 99, 4)
	r.reopen() // a checkpoint whose chunk 0 has 100 entries
	if v, err = r.s.Volume("a"); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 98, 5) // buffered while the volume grows
	const blocks = mapChunkEntries + 100
	if err := r.s.ResizeVolume("a", blocks*BlockSize); err != nil {
		t.Fatal(err)
	}
	if v.Size() != blocks*BlockSize || r.s.Volumes()[0].Size != blocks*BlockSize {
		t.Fatalf("after the resize: Size %d, Volumes %+v", v.Size(), r.s.Volumes())
	}
	writeTags(t, v, 100, 6)
	writeTags(t, v, blocks-1, 7)
	if err := v.WriteAt(ctx, make([]byte, BlockSize), blocks*BlockSize, 0); !errors.Is(err, backend.ErrOutOfRange) {
		t.Fatalf("write past the new end: %v", err)
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			lba  uint64
			want []uint64
		}{{0, []uint64{1, 2, 3, 0}}, {97, []uint64{0, 5, 4, 6, 0}}, {blocks - 2, []uint64{0, 7}}} {
			if got := readTags(t, v, c.lba, len(c.want)); !slices.Equal(got, c.want) {
				t.Fatalf("%s: blocks from %d read %v, want %v", when, c.lba, got, c.want)
			}
		}
	}
	check("grown")
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("destaged")
	r.reopen()
	if v, err = r.s.Volume("a"); err != nil || v.Size() != blocks*BlockSize {
		t.Fatalf("after reopen: %v, size %d", err, v.Size())
	}
	check("reopened")
}

// TestResizeVolumeRefusesBadSizes: shrinking, misaligned, non-positive and
// oversized sizes and unknown volumes are errors that change nothing; the
// same size is a no-op; a closed store refuses.
func TestResizeVolumeRefusesBadSizes(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 64*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		vol  string
		size int64
		want error
	}{
		{"shrink", "a", 32 * BlockSize, ErrShrinkVolume},
		{"misaligned", "a", 64*BlockSize + 512, ErrVolumeSize},
		{"zero", "a", 0, ErrVolumeSize},
		{"negative", "a", -BlockSize, ErrVolumeSize},
		{"too large", "a", maxVolumeBlocks * BlockSize, ErrVolumeSize},
		{"unknown volume", "b", 128 * BlockSize, ErrNoVolume},
		{"same size", "a", 64 * BlockSize, nil},
	}
	for _, c := range cases {
		if err := r.s.ResizeVolume(c.vol, c.size); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: ResizeVolume(%q, %d) = %v, want %v", c.name, c.vol, c.size, err, c.want)
		}
		if v.Size() != 64*BlockSize {
			t.Fatalf("%s: the size changed to %d", c.name, v.Size())
		}
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.s.ResizeVolume("a", 128*BlockSize); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("ResizeVolume on a closed store: %v", err)
	}
	r.s = nil
}

// TestResizeVolumeDuringIO grows a volume step by step while goroutines
// write and read blocks below the size they see (the race detector checks
// the size and the map's directory).
func TestResizeVolumeDuringIO(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 16*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var ops atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() { errs <- resizeWorkload(v, uint64(g), &ops, stop) })
	}
	for blocks := int64(32); blocks <= 4*mapChunkEntries; blocks *= 2 {
		for start := ops.Load(); ops.Load() < start+20 && len(errs) == 0; {
			runtime.Gosched() // let the workload run at this size
		}
		if err := r.s.ResizeVolume("a", blocks*BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// resizeWorkload writes block lba with tag lba+1 and reads it back, at LBAs
// of parity g below the volume's current size, counting in ops, until stop.
func resizeWorkload(v *Volume, g uint64, ops *atomic.Int64, stop <-chan struct{}) error {
	buf := make([]byte, BlockSize)
	for i := uint64(0); ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		n := uint64(v.Size() / BlockSize)
		lba := (i*7919*2 + g) % n
		makeBlock(buf, lba+1)
		if err := v.WriteAt(ctx, buf, int64(lba)*BlockSize, 0); err != nil {
			return fmt.Errorf("write of block %d of %d: %w", lba, n, err)
		}
		tags, err := tryReadTags(v, lba, 1)
		if err != nil || tags[0] != lba+1 {
			return fmt.Errorf("block %d of %d reads %v (%v), want %d", lba, n, tags, err, lba+1)
		}
		ops.Add(1)
	}
}

// TestResizeVolumeCrash cuts a resize and the writes, destage and
// checkpoint that follow it at every persistence point in turn: after
// recovery the volume has its old size or, if the resize was acknowledged,
// its new one; the old data is intact; the acknowledged tail writes read
// back, the one the crash cut reads either way. Under the race detector
// (which makes the crash-capable drives slow) or -short, every fourth point.
func TestResizeVolumeCrash(t *testing.T) {
	step := int64(1)
	if raceEnabled || testing.Short() {
		step = 4
	}
	for at := int64(1); ; at += step {
		if at > 200 {
			t.Fatal("the sequence still crashes after 200 persistence points")
		}
		var tripped bool
		t.Run(fmt.Sprintf("at=%d", at), func(t *testing.T) {
			var err error
			if tripped, err = runResizeCrash(t, at); err != nil {
				t.Fatal(err)
			}
		})
		if t.Failed() || !tripped {
			return
		}
	}
}

const (
	resizeOld = 64
	resizeNew = mapChunkEntries + 64 // across a map-chunk boundary
)

// runResizeCrash runs the sequence with a crash at the at-th persistence
// point after the setup and checks the recovered volume. It reports
// whether the crash came before the sequence ended.
func runResizeCrash(t *testing.T, at int64) (bool, error) {
	cfg := defaultRigConfig()
	cfg.crashable, cfg.driveSize, cfg.opts.synchronous = true, 2<<20, true
	r := newRig(t, cfg)
	v, err := r.s.CreateVolume("a", resizeOld*BlockSize)
	if err != nil {
		return false, err
	}
	model := make([]uint64, resizeNew)
	for lba := range uint64(resizeOld) {
		model[lba] = lba + 1
		writeTags(t, v, lba, lba+1)
	}
	if err := r.s.Flush(ctx); err != nil {
		return false, err
	}
	r.gate.at.Store(r.gate.ops.Load() + at)
	resized, maybe := runResizeSteps(r, v, model)
	tripped := r.gate.crashed.Load()
	r.crash(at, int(at%3)*50)
	if err := r.tryOpen(); err != nil {
		return tripped, fmt.Errorf("reopening after the crash: %w", err)
	}
	return tripped, checkResized(r, resized, model, maybe)
}

// runResizeSteps grows the volume, then writes, destages, checkpoints and
// writes again, updating model with what was acknowledged, until a step
// fails. It returns whether the resize was acknowledged and the LBAs of the
// write the crash cut, with their tags.
func runResizeSteps(r *rig, v *Volume, model []uint64) (bool, map[uint64]uint64) {
	if err := r.s.ResizeVolume("a", resizeNew*BlockSize); err != nil {
		return false, nil
	}
	steps := []struct {
		lba  uint64
		tags []uint64
	}{{resizeOld, []uint64{1001, 1002}}, {resizeNew - 1, []uint64{1003}}, {3, []uint64{1004}},
		{0, nil}, {resizeNew - 2, []uint64{1005, 1006}}}
	for _, s := range steps {
		var err error
		if s.tags == nil {
			if err = r.s.Flush(ctx); err == nil {
				err = r.s.call(ctx, command{kind: cmdCheckpoint})
			}
		} else {
			buf := make([]byte, len(s.tags)*BlockSize)
			for i, tag := range s.tags {
				makeBlock(buf[i*BlockSize:], tag)
			}
			err = v.WriteAt(ctx, buf, int64(s.lba)*BlockSize, 0)
		}
		if err != nil {
			maybe := map[uint64]uint64{}
			for i, tag := range s.tags {
				maybe[s.lba+uint64(i)] = tag
			}
			return true, maybe
		}
		copy(model[s.lba:], s.tags)
	}
	return true, nil
}

// checkResized compares the recovered volume with the model.
func checkResized(r *rig, resized bool, model []uint64, maybe map[uint64]uint64) error {
	v, err := r.s.Volume("a")
	if err != nil {
		return err
	}
	size := v.Size() / BlockSize
	if (size != resizeOld && size != resizeNew) || (resized && size != resizeNew) {
		return fmt.Errorf("recovered size %d blocks (resize acknowledged: %v)", size, resized)
	}
	got, err := tryReadTags(v, 0, int(size))
	if err != nil {
		return err
	}
	for lba, tag := range got {
		want := model[lba]
		alt, ok := maybe[uint64(lba)]
		if tag != want && !(ok && tag == alt) {
			return fmt.Errorf("block %d reads tag %d, want %d (or %d: %v)", lba, tag, want, alt, ok)
		}
	}
	return nil
}
