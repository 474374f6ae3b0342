package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"

	"basalt/pkg/backend"
)

// crashBackend is a local replica that loses unflushed writes in a crash: it
// remembers, for every block written since the last Flush, each version the
// block had, and Crash leaves each such block at one of them, drawn at
// random, independently of the others (a drive that reorders its writes).
type crashBackend struct {
	*backend.Memory
	mu       sync.Mutex
	versions map[int64][][]byte // block -> its content at the last Flush, then after each write
}

func newCrashBackend(size int64, blockSize int) *crashBackend {
	m, err := backend.NewMemory(size, blockSize)
	if err != nil {
		panic(err)
	}
	return &crashBackend{Memory: m, versions: make(map[int64][][]byte)}
}

func (b *crashBackend) record(off, n int64, write func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	bs := int64(b.BlockSize())
	ctx := context.Background()
	for blk := off / bs; blk < (off+n)/bs; blk++ {
		if _, ok := b.versions[blk]; !ok {
			old := make([]byte, bs)
			if err := b.Memory.ReadAt(ctx, old, blk*bs); err != nil {
				return err
			}
			b.versions[blk] = [][]byte{old}
		}
	}
	if err := write(); err != nil {
		return err
	}
	for blk := off / bs; blk < (off+n)/bs; blk++ {
		now := make([]byte, bs)
		if err := b.Memory.ReadAt(ctx, now, blk*bs); err != nil {
			return err
		}
		b.versions[blk] = append(b.versions[blk], now)
	}
	return nil
}

func (b *crashBackend) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	return b.record(off, int64(len(p)), func() error { return b.Memory.WriteAt(ctx, p, off, f) })
}

func (b *crashBackend) Trim(ctx context.Context, off, n int64) error {
	return b.record(off, n, func() error { return b.Memory.Trim(ctx, off, n) })
}

func (b *crashBackend) WriteZeroes(ctx context.Context, off, n int64) error {
	return b.record(off, n, func() error { return b.Memory.WriteZeroes(ctx, off, n) })
}

func (b *crashBackend) Flush(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.versions)
	return nil
}

// Crash leaves every block written since the last Flush at one of its
// versions.
func (b *crashBackend) Crash(r *rand.Rand) {
	b.mu.Lock()
	defer b.mu.Unlock()
	blocks := make([]int64, 0, len(b.versions))
	for blk := range b.versions {
		blocks = append(blocks, blk)
	}
	slices.Sort(blocks)
	bs := int64(b.BlockSize())
	for _, blk := range blocks {
		v := b.versions[blk]
		if err := b.Memory.WriteAt(context.Background(), v[r.IntN(len(v))], blk*bs, 0); err != nil {
			panic(err)
		}
	}
	clear(b.versions)
}

// contents returns a copy of the whole replica.
func (b *crashBackend) contents() []byte {
	out := make([]byte, b.Size())
	if err := b.Memory.ReadAt(context.Background(), out, 0); err != nil {
		panic(err)
	}
	return out
}
