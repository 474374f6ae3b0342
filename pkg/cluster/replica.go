package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"basalt/pkg/backend"
)

// Replicas creates, opens and deletes this node's local replicas, by the
// volumes' LocalName. Implementations: FileReplicas, MemoryReplicas, and
// pkg/node's replicas in the log-structured store.
type Replicas interface {
	// Open opens replica name, creating it with size bytes (thin) if it
	// does not exist. An existing replica keeps its size, which may exceed
	// size after a resize.
	Open(name string, size int64) (Replica, error)
	// Delete deletes a closed replica and its data; a missing one is no
	// error.
	Delete(name string) error
	// List names the replicas that exist.
	List() ([]string, error)
}

// Replica is one local replica.
type Replica interface {
	backend.Backend
	// Grow makes the replica size bytes; it never shrinks. It may be
	// called while I/O is in flight.
	Grow(size int64) error
}

// swappable is a Replica whose backend is replaced by a larger one to grow
// (for backends that only take their size when opened).
type swappable struct {
	mu     sync.RWMutex
	b      backend.Backend
	reopen func(old backend.Backend, size int64) (backend.Backend, error)
}

func (s *swappable) cur() backend.Backend {
	s.mu.RLock()
	return s.b
}

func (s *swappable) Size() int64    { defer s.mu.RUnlock(); return s.cur().Size() }
func (s *swappable) BlockSize() int { defer s.mu.RUnlock(); return s.cur().BlockSize() }
func (s *swappable) Close() error   { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Close() }
func (s *swappable) Flush(ctx context.Context) error {
	defer s.mu.RUnlock()
	return s.cur().Flush(ctx)
}

func (s *swappable) ReadAt(ctx context.Context, p []byte, off int64) error {
	defer s.mu.RUnlock()
	return s.cur().ReadAt(ctx, p, off)
}

func (s *swappable) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	defer s.mu.RUnlock()
	return s.cur().WriteAt(ctx, p, off, f)
}

func (s *swappable) Trim(ctx context.Context, off, n int64) error {
	defer s.mu.RUnlock()
	return s.cur().Trim(ctx, off, n)
}

func (s *swappable) WriteZeroes(ctx context.Context, off, n int64) error {
	defer s.mu.RUnlock()
	return s.cur().WriteZeroes(ctx, off, n)
}

// Grow waits for the I/O in flight, then swaps in the reopened backend.
func (s *swappable) Grow(size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if size <= s.b.Size() {
		return nil
	}
	nb, err := s.reopen(s.b, size)
	if err != nil {
		return fmt.Errorf("cluster: while growing a replica to %d bytes: %w", size, err)
	}
	s.b = nb
	return nil
}

// FileReplicas keeps replicas as sparse files <Dir>/<name>.img.
type FileReplicas struct{ Dir string }

const replicaExt = ".img"

func (r FileReplicas) path(name string) string { return filepath.Join(r.Dir, name+replicaExt) }

// Open implements Replicas.
func (r FileReplicas) Open(name string, size int64) (Replica, error) {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: replica directory: %w", err)
	}
	p := r.path(name)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Size() > size {
		size = st.Size() - st.Size()%BlockSize
	}
	f, err := backend.OpenFile(p, size, BlockSize)
	if err != nil {
		return nil, fmt.Errorf("cluster: replica %s: %w", name, err)
	}
	return &swappable{b: f, reopen: func(old backend.Backend, size int64) (backend.Backend, error) {
		nb, err := backend.OpenFile(p, size, BlockSize)
		if err != nil {
			return nil, err
		}
		return nb, errors.Join(old.Flush(context.Background()), old.Close())
	}}, nil
}

// Delete implements Replicas.
func (r FileReplicas) Delete(name string) error {
	if err := os.Remove(r.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cluster: while deleting replica %s: %w", name, err)
	}
	return nil
}

// List implements Replicas.
func (r FileReplicas) List() ([]string, error) {
	ents, err := os.ReadDir(r.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: while listing replicas: %w", err)
	}
	var out []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), replicaExt); ok && e.Type().IsRegular() {
			out = append(out, name)
		}
	}
	return out, nil
}

// MemoryReplicas keeps replicas in memory (tests, demos): they survive
// Close and reopen within the process, not a restart.
type MemoryReplicas struct {
	mu   sync.Mutex
	data map[string]*backend.Memory
}

// Open implements Replicas.
func (r *MemoryReplicas) Open(name string, size int64) (Replica, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.data == nil {
		r.data = map[string]*backend.Memory{}
	}
	m := r.data[name]
	if m == nil {
		var err error
		if m, err = backend.NewMemory(size, BlockSize); err != nil {
			return nil, err
		}
		r.data[name] = m
	}
	return &swappable{b: nopClose{m}, reopen: func(old backend.Backend, size int64) (backend.Backend, error) {
		return r.grow(name, old, size)
	}}, nil
}

func (r *MemoryReplicas) grow(name string, old backend.Backend, size int64) (backend.Backend, error) {
	nm, err := backend.NewMemory(size, BlockSize)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < old.Size(); off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), old.Size()-off)]
		if err := old.ReadAt(context.Background(), p, off); err != nil {
			return nil, err
		}
		if err := nm.WriteAt(context.Background(), p, off, 0); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	r.data[name] = nm
	r.mu.Unlock()
	return nopClose{nm}, nil
}

// Delete implements Replicas.
func (r *MemoryReplicas) Delete(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.data, name)
	return nil
}

// List implements Replicas.
func (r *MemoryReplicas) List() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name := range r.data {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// nopClose keeps a memory replica's data when its handle closes.
type nopClose struct{ *backend.Memory }

func (nopClose) Close() error { return nil }
