package backend

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// exercise runs the same contract checks against any Backend.
func exercise(t *testing.T, b Backend) {
	t.Helper()
	ctx := context.Background()
	bs := int64(b.BlockSize())
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 3*bs)
	for i := range want {
		want[i] = byte(rng.IntN(256))
	}
	// Unwritten blocks read as zeroes.
	got := make([]byte, len(want))
	if err := b.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, make([]byte, len(got))) {
		t.Fatalf("fresh read: err %v, nonzero data", err)
	}
	// A write straddling a chunk boundary reads back.
	off := int64(memoryChunkSize) - bs
	if err := b.WriteAt(ctx, want, off, WriteFUA); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := b.ReadAt(ctx, got, off); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: err %v, equal %v", err, bytes.Equal(got, want))
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	// Trim of the middle block: it reads zeroes, its neighbours are intact.
	if err := b.Trim(ctx, off+bs, bs); err != nil {
		t.Fatalf("trim: %v", err)
	}
	if err := b.ReadAt(ctx, got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:bs], want[:bs]) || !bytes.Equal(got[bs:2*bs], make([]byte, bs)) || !bytes.Equal(got[2*bs:], want[2*bs:]) {
		t.Fatalf("trim changed the wrong blocks")
	}
	if err := b.WriteZeroes(ctx, off, 3*bs); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadAt(ctx, got, off); err != nil || !bytes.Equal(got, make([]byte, len(got))) {
		t.Fatalf("write zeroes: err %v", err)
	}
	// Bad ranges.
	cases := []struct {
		name string
		off  int64
		n    int
		want error
	}{
		{"past end", b.Size(), int(bs), ErrOutOfRange},
		{"straddles end", b.Size() - bs, int(2 * bs), ErrOutOfRange},
		{"negative", -bs, int(bs), ErrOutOfRange},
		{"misaligned offset", 1, int(bs), ErrMisaligned},
		{"misaligned length", 0, int(bs) + 1, ErrMisaligned},
	}
	for _, c := range cases {
		buf := make([]byte, c.n)
		if err := b.ReadAt(ctx, buf, c.off); !errors.Is(err, c.want) {
			t.Errorf("%s: read error %v, want %v", c.name, err, c.want)
		}
		if err := b.WriteAt(ctx, buf, c.off, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: write error %v, want %v", c.name, err, c.want)
		}
		if err := b.Trim(ctx, c.off, int64(c.n)); !errors.Is(err, c.want) {
			t.Errorf("%s: trim error %v, want %v", c.name, err, c.want)
		}
	}
}

func TestMemoryBackendContract(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		m, err := NewMemory(8<<20, bs)
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, m)
	}
}

func TestFileBackendContract(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		f, err := OpenFile(filepath.Join(t.TempDir(), "vol"), 8<<20, bs)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("block size %d: O_DIRECT %v", bs, f.Direct())
		exercise(t, f)
		f.Close()
	}
}

func TestFileBackendPersistsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol")
	ctx := context.Background()
	f, err := OpenFile(path, 4<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("basalt!!"), 4096/8*2)
	// An unaligned buffer takes the bounce path under O_DIRECT.
	unaligned := make([]byte, len(want)+1)[1:]
	copy(unaligned, want)
	if err := f.WriteAt(ctx, unaligned, 8192, WriteFUA); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := OpenFile(path, 4<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, len(want)+3)[3:]
	if err := g.ReadAt(ctx, got, 8192); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after reopen: err %v, equal %v", err, bytes.Equal(got, want))
	}
}

func TestBadGeometryIsRejected(t *testing.T) {
	if _, err := NewMemory(4096, 1024); err == nil {
		t.Error("block size 1024 accepted")
	}
	if _, err := NewMemory(4097, 4096); err == nil {
		t.Error("size not a multiple of the block size accepted")
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "x"), 0, 4096); err == nil {
		t.Error("zero size accepted")
	}
}

type healthy struct{ Backend }

func (healthy) Health() (Health, bool) { return Health{Drives: 3, Parity: 1}, true }

// HealthOf returns a reporter's health and nothing for other backends.
func TestHealthOf(t *testing.T) {
	m, err := NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := HealthOf(m); ok || h != (Health{}) {
		t.Fatalf("memory backend reports health %+v", h)
	}
	if h, ok := HealthOf(healthy{m}); !ok || h.Drives != 3 || h.Parity != 1 {
		t.Fatalf("HealthOf = %+v, %v", h, ok)
	}
}

// asyncCopier offers asynchronous writes (async) and says it copies on
// submit (copies); neither WriteAtAsync nor its result matters here.
type asyncCopier struct {
	Backend
	async, copies bool
}

func (b asyncCopier) AsyncWrites() bool    { return b.async }
func (b asyncCopier) CopiesOnSubmit() bool { return b.copies }
func (b asyncCopier) WriteAtAsync(p []byte, off int64, f WriteFlags, done func(error)) {
	done(b.WriteAt(context.Background(), p, off, f))
}

// CopiesOnSubmit holds only for a backend with asynchronous writes that
// says it copies on submit.
func TestCopiesOnSubmit(t *testing.T) {
	m, err := NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    Backend
		want bool
	}{
		{"memory", m, false},
		{"async, copies", asyncCopier{m, true, true}, true},
		{"async, keeps p", asyncCopier{m, true, false}, false},
		{"copies, asynchronous writes off", asyncCopier{m, false, true}, false},
	} {
		if got := CopiesOnSubmit(tc.b); got != tc.want {
			t.Errorf("%s: CopiesOnSubmit %v, want %v", tc.name, got, tc.want)
		}
	}
}
