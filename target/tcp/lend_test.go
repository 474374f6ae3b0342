package tcp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
	"basalt/target"
)

// In-capsule write data lent in place to an asynchronous write whose
// backend copies it on submit (backend.CopiesOnSubmit), against the real
// core: the write holds no data buffer while the backend has it, and every
// byte written is what the host sent, however late and in whatever order
// the backend completes.

// submitBackend is a memory backend with asynchronous writes that wait in
// the backend until the test completes them, from a goroutine of its own.
// With copies it copies p before WriteAtAsync returns and says so
// (backend.SubmitCopier); without, it keeps p until the write runs, as an
// AsyncWriter may. Like a replicated volume it is no target.NonBlocker,
// unless nonBlocking (its reads and writes never block, as Memory's, but
// WriteAtAsync still keeps p without copies).
type submitBackend struct {
	*backend.Memory
	copies, nonBlocking bool
	// ioq is the I/O queue the writes arrive on; lent counts the writes
	// whose p is that queue's in-capsule data in its read buffer
	// (queue.lent), checked on its receive goroutine, which calls
	// WriteAtAsync.
	ioq  atomic.Pointer[queue]
	lent atomic.Int32

	mu        sync.Mutex
	parked    []func()
	submitted chan struct{}
}

func newSubmitBackend(copies, nonBlocking bool) *submitBackend {
	m, _ := backend.NewMemory(16*mib, itLBA)
	return &submitBackend{Memory: m, copies: copies, nonBlocking: nonBlocking, submitted: make(chan struct{}, 256)}
}

func (b *submitBackend) AsyncWrites() bool    { return true }
func (b *submitBackend) CopiesOnSubmit() bool { return b.copies }
func (b *submitBackend) NonBlocking() bool    { return b.nonBlocking }

func (b *submitBackend) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	if q := b.ioq.Load(); q != nil && len(q.lent) > 0 && len(p) > 0 && &p[0] == &q.lent[0] {
		b.lent.Add(1)
	}
	if b.copies {
		p = bytes.Clone(p)
	}
	b.mu.Lock()
	b.parked = append(b.parked, func() { done(b.WriteAt(context.Background(), p, off, f)) })
	b.mu.Unlock()
	b.submitted <- struct{}{}
}

// waitSubmitted waits for n more writes to reach the backend.
func (b *submitBackend) waitSubmitted(t *testing.T, n int) {
	t.Helper()
	for range n {
		<-b.submitted
	}
}

// complete runs the parked writes in the order shuffle leaves them, from a
// goroutine of its own.
func (b *submitBackend) complete(shuffle func([]func())) {
	b.mu.Lock()
	parked := b.parked
	b.parked = nil
	b.mu.Unlock()
	shuffle(parked)
	go func() {
		for _, f := range parked {
			f()
		}
	}()
}

// completeAll completes whatever is parked, in order.
func (b *submitBackend) completeAll() { b.complete(func([]func()) {}) }

// ioQueue returns lt's I/O queue (QID 1).
func (lt *liveTarget) ioQueue(t *testing.T) *queue {
	t.Helper()
	lt.l.mu.Lock()
	defer lt.l.mu.Unlock()
	for q := range lt.l.mu.conns {
		if q.core.QID() == 1 {
			return q
		}
	}
	t.Fatal("no I/O queue")
	return nil
}

// A 4 KiB in-capsule write to an asynchronous backend that copies on
// submit is lent the read buffer: the backend sees the in-capsule data
// where the receiver peeked it, and while the backend holds the writes no
// data buffer is charged for them. A backend that keeps p gets the slot's
// buffer, charged until the write completes, even if it is a NonBlocker.
// Either way the data land.
func TestInCapsuleWriteLentToBackendCopyingOnSubmit(t *testing.T) {
	for _, tc := range []struct {
		name                string
		copies, nonBlocking bool
	}{
		{"copies on submit", true, false},
		{"keeps the data", false, false},
		{"keeps the data, non-blocking", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoGoroutineLeaks(t)
			be := newSubmitBackend(tc.copies, tc.nonBlocking)
			lt := startLiveTarget(t, target.Config{}, be, testOptions())
			t.Cleanup(be.completeAll) // before the target's: a failure must not hang teardown
			_, io := lt.connectIO(t, 31)
			be.ioq.Store(lt.ioQueue(t))
			// The Connect's buffer goes back after its response is written.
			waitFor(t, func() bool { return lt.l.Budget().Stats().ReadBytes == 0 })
			const writes = 8
			var cids []uint16
			for i := range writes {
				c := rwCmd(io, nvme.IOWrite, uint64(16*i), 8, nvme.SGLDataBlockOffset)
				c.SetNSID(1)
				io.sendCapsule(&c, pattern(4096, byte(i)))
				cids = append(cids, c.CID())
				be.waitSubmitted(t, 1) // alone in the read buffer when it arrives
			}
			held := lt.l.Budget().Stats().ReadBytes
			lent := int(be.lent.Load())
			switch {
			case tc.copies && (lent != writes || held != 0):
				t.Fatalf("%d of %d writes lent, %d bytes of buffers held; want all lent and none held", lent, writes, held)
			case !tc.copies && (lent != 0 || held < writes*4096):
				t.Fatalf("%d writes lent, %d bytes of buffers held; want none lent and %d held", lent, held, writes*4096)
			}
			be.complete(slices.Reverse)
			for range writes {
				cpl := nvme.DecodeCompletion(io.readPDU().hdr[8:])
				if !cpl.Status.Success() {
					t.Fatalf("write CID %d: %v", cpl.CID, cpl.Status)
				}
			}
			for i := range writes {
				got := make([]byte, 4096)
				if err := be.ReadAt(context.Background(), got, int64(16*i)*itLBA); err != nil || !bytes.Equal(got, pattern(4096, byte(i))) {
					t.Fatalf("write %d (CID %d) reads back wrong (%v)", i, cids[i], err)
				}
			}
			checkReleased(t, lt.sub.Namespace(1), lt.l.Budget())
		})
	}
}

// lendSeed returns the seed of a seeded lending test: BASALT_TCP_LEND_SEED
// replays one, else a fresh one; it is logged either way.
func lendSeed(t *testing.T) uint64 {
	seed, err := strconv.ParseUint(os.Getenv("BASALT_TCP_LEND_SEED"), 10, 64)
	if err != nil || seed == 0 {
		seed = 1 + rand.Uint64N(1<<40)
	}
	t.Logf("seed %d (BASALT_TCP_LEND_SEED=%d replays it)", seed, seed)
	return seed
}

// Bursts of in-capsule writes of 512 B, 4 KiB and 8 KiB with distinct
// random content, each burst sent in one host write so that the read
// buffer holds and then reuses the data of many (some capsules straddle a
// refill and take the copying path), completed by the backend only once
// the whole burst has reached it, in a random order, on another goroutine.
// Every byte of every write is checked in the backend. A backend that
// keeps the data must never be lent it, one that copies may be: a wrong
// choice, or data lent from a buffer the receiver has already reused,
// shows as wrong data.
func TestLentWritesKeepTheirData(t *testing.T) {
	seed := lendSeed(t)
	for _, tc := range []struct {
		name                string
		copies, nonBlocking bool
		readBuf             int
	}{
		{"copies on submit", true, false, 0},
		{"copies on submit, 16 KiB read buffer", true, false, 16 << 10},
		{"keeps the data, 16 KiB read buffer", false, false, 16 << 10},
		{"keeps the data, non-blocking", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newSubmitBackend(tc.copies, tc.nonBlocking)
			opts := testOptions()
			opts.ReadBufferSize = tc.readBuf
			lt := startLiveTarget(t, target.Config{}, be, opts)
			t.Cleanup(be.completeAll)
			_, io := lt.connectIO(t, 127)
			be.ioq.Store(lt.ioQueue(t))
			rng := rand.New(rand.NewPCG(seed, uint64(len(tc.name))))
			for round := range 24 {
				writeBurst(t, rng, be, io, round)
			}
			if lent := be.lent.Load(); tc.copies != (lent > 0) {
				t.Fatalf("%d writes lent in place, want lending %v", lent, tc.copies)
			}
			t.Logf("%d writes lent in place", be.lent.Load())
		})
	}
}

// writeBurst sends 48 writes to distinct 8 KiB extents in one host write,
// completes them in a random order once all have reached the backend, and
// checks what the backend holds.
func writeBurst(t *testing.T, rng *rand.Rand, be *submitBackend, io *testHost, round int) {
	t.Helper()
	const writes, extent = 48, 16 // blocks per extent: 8 KiB
	type write struct {
		slba uint64
		data []byte
	}
	var burst bytes.Buffer
	var ws []write
	for _, e := range rng.Perm(writes) {
		blocks := []int{1, 8, 16}[rng.IntN(3)]
		w := write{slba: uint64(e*extent + rng.IntN(extent-blocks+1)), data: make([]byte, blocks*itLBA)}
		for i := range w.data {
			w.data[i] = byte(rng.Uint32())
		}
		c := rwCmd(io, nvme.IOWrite, w.slba, blocks, nvme.SGLDataBlockOffset)
		c.SetNSID(1)
		burst.Write(io.capsule(&c, w.data))
		ws = append(ws, w)
	}
	io.write(burst.Bytes())
	be.waitSubmitted(t, writes)
	be.complete(func(f []func()) { rng.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] }) })
	for range writes {
		p := io.readPDU()
		if cpl := nvme.DecodeCompletion(p.hdr[8:]); p.ch.Type != nvme.PDUCapsuleResp || !cpl.Status.Success() {
			t.Fatalf("round %d: %v %+v", round, p.ch.Type, cpl)
		}
	}
	for i, w := range ws {
		got := make([]byte, len(w.data))
		if err := be.ReadAt(context.Background(), got, int64(w.slba)*itLBA); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w.data) {
			t.Fatalf("round %d write %d (%d bytes at LBA %d) reads back wrong: %d bytes differ", round, i, len(w.data), w.slba, differing(got, w.data))
		}
	}
}

func differing(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
