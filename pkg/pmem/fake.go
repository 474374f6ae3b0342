package pmem

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Fake is an in-memory Region that simulates persistence. It keeps a shadow
// copy of the bytes as of their last Persist, and Crash builds the image a power
// loss would leave: every persisted byte, plus seeded random 8-byte-aligned
// fragments of the stores that were never persisted. It can also make Persist
// fail from a chosen call on, which is how tests stop a workload at every
// persistence point.
//
// Bytes and Persist may be used concurrently for disjoint ranges, as with any
// Region. Crash, CrashRegion and Persisted read the whole region and must not
// run concurrently with stores to it.
type Fake struct {
	data []byte // what the program sees
	seed int64

	mu struct {
		sync.Mutex
		persisted    []byte // the bytes as of their last Persist
		persistCalls int    // calls to Persist so far, failed ones included
		failAfter    int    // calls that succeed before failErr; < 0: never fail
		failErr      error
		crashes      uint64 // calls to Crash so far, to vary its draws
		closed       bool
	}
}

var _ Region = (*Fake)(nil)

// NewFake returns a zeroed Fake of size bytes (at least 1) whose crash images
// are drawn from seed: the same seed and the same history give the same images.
func NewFake(size int, seed int64) *Fake {
	if size <= 0 {
		panic(fmt.Sprintf("pmem: NewFake of %d bytes", size))
	}
	return newFake(make([]byte, size), seed)
}

// NewFakeImage returns a Fake holding a copy of image, all of it persisted.
// Tests use it to open a crash image, or an arbitrary one.
func NewFakeImage(image []byte, seed int64) *Fake {
	if len(image) == 0 {
		panic("pmem: NewFakeImage of an empty image")
	}
	return newFake(bytes.Clone(image), seed)
}

func newFake(data []byte, seed int64) *Fake {
	f := &Fake{data: data, seed: seed}
	f.mu.persisted = bytes.Clone(data)
	f.mu.failAfter = -1
	return f
}

// Bytes returns the simulated memory.
func (f *Fake) Bytes() []byte { return f.data }

// Size returns the length of the region.
func (f *Fake) Size() int { return len(f.data) }

// Mode returns ModeFake.
func (f *Fake) Mode() Mode { return ModeFake }

// Persist copies [off, off+n) into the persisted shadow, unless a failure set
// by FailAfter is due, in which case it persists nothing and returns that error.
func (f *Fake) Persist(off, n int) error {
	if err := checkRange(off, n, len(f.data)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return ErrClosed
	}
	f.mu.persistCalls++
	if f.mu.failAfter >= 0 && f.mu.persistCalls > f.mu.failAfter {
		return f.mu.failErr
	}
	copy(f.mu.persisted[off:off+n], f.data[off:off+n])
	return nil
}

// FailAfter lets the next calls successful Persist calls through and makes
// every one after them fail with err, persisting nothing: the region behaves as
// if power were lost at that point. calls counts from the start of the Fake's
// life, failed calls included; a negative calls turns failures off.
func (f *Fake) FailAfter(calls int, err error) {
	if err == nil {
		panic("pmem: FailAfter with a nil error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.failAfter = calls
	f.mu.failErr = err
}

// PersistCalls returns how many times Persist has been called, failed calls
// included.
func (f *Fake) PersistCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.persistCalls
}

// Persisted returns a copy of the persisted shadow: the image a power loss
// would leave if no unpersisted store reached the media.
func (f *Fake) Persisted() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.mu.persisted)
}

// Crash returns the image a power loss would leave now: the persisted bytes,
// and for every 64-byte line that holds unpersisted stores, one of: none of
// them, all of them, or a random subset of its 8-byte words (each kept with
// probability one half). The draws come from the seed and the number of
// earlier Crash calls, so a test that fails can be replayed.
func (f *Fake) Crash() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.crashes++
	random := rand.New(rand.NewPCG(uint64(f.seed), f.mu.crashes))
	image := bytes.Clone(f.mu.persisted)
	for line := 0; line < len(image); line += CacheLineSize {
		end := min(line+CacheLineSize, len(image))
		if bytes.Equal(image[line:end], f.data[line:end]) {
			continue
		}
		switch random.IntN(4) {
		case 0: // the line never left the CPU cache
		case 1: // the whole line was evicted
			copy(image[line:end], f.data[line:end])
		default: // some words were
			for word := line; word < end; word += 8 {
				if random.IntN(2) == 0 {
					copy(image[word:min(word+8, end)], f.data[word:min(word+8, end)])
				}
			}
		}
	}
	return image
}

// CrashRegion returns a new Fake holding Crash's image, all of it persisted,
// as the region looks when the machine comes back. Its seed is derived from
// this Fake's.
func (f *Fake) CrashRegion() *Fake {
	image := f.Crash()
	f.mu.Lock()
	seed := int64(uint64(f.seed) ^ f.mu.crashes*0x9E3779B97F4A7C15)
	f.mu.Unlock()
	return newFake(image, seed)
}

// Close makes later Persist calls fail with ErrClosed. Bytes stays readable,
// so that tests can still crash a closed Fake.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return ErrClosed
	}
	f.mu.closed = true
	return nil
}
