package disk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// faultyEnter is an io_uring_enter that fails on demand: submitErr fails
// submissions, waitErr waits for completions (0: the real system call).
// With hold set, a failing submission first reports on entered and waits
// for release, so a test can queue more requests behind it.
type faultyEnter struct {
	submitErr, waitErr atomic.Uintptr // a syscall.Errno
	submits            atomic.Int32   // submissions that reached the kernel
	waits              atomic.Int32   // waits that reached the kernel
	hold               atomic.Bool
	entered, release   chan struct{}
}

func newFaultyEnter() *faultyEnter {
	return &faultyEnter{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (f *faultyEnter) enter(fd int, toSubmit, minComplete, flags uint32) (int, syscall.Errno) {
	if flags&uringEnterGetEvents != 0 {
		if errno := syscall.Errno(f.waitErr.Load()); errno != 0 {
			return 0, errno
		}
		f.waits.Add(1) // after the check: this wait is a real one
		return uringEnterSyscall(fd, toSubmit, minComplete, flags)
	}
	if errno := syscall.Errno(f.submitErr.Load()); errno != 0 {
		if f.hold.Load() {
			f.entered <- struct{}{}
			<-f.release
		}
		return 0, errno
	}
	f.submits.Add(1)
	return uringEnterSyscall(fd, toSubmit, minComplete, flags)
}

// faultDeadline bounds every wait in these tests: a hang is the bug.
const faultDeadline = 10 * time.Second

// doResult is what a do call returned.
type doResult struct {
	res int32
	err error
}

// goDo runs q.do in a goroutine and returns the channel its result comes on.
func goDo(q *uringQueue, op uint8, fd int32, p []byte, off int64) <-chan doResult {
	c := make(chan doResult, 1)
	go func() {
		res, err := q.do(op, fd, p, off)
		c <- doResult{res, err}
	}()
	return c
}

// await returns the result from c, failing the test if none comes in time.
func await(t *testing.T, what string, c <-chan doResult) doResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(faultDeadline):
		t.Fatalf("%s hangs\n%s", what, allStacks())
		return doResult{}
	}
}

// allStacks returns every goroutine's stack, to show a hang.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}

// closeWithin closes q, failing the test if Close hangs.
func closeWithin(t *testing.T, q *uringQueue) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		q.close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(faultDeadline):
		t.Fatalf("close hangs\n%s", allStacks())
	}
}

// eventually waits until cond holds, failing the test if it never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(faultDeadline)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("never: %s", what)
		default:
			runtime.Gosched()
		}
	}
}

// pendingPipe returns a blocking pipe: an io_uring read of its read end
// stays with the kernel until something is written to the other.
func pendingPipe(t *testing.T) (r, w int) {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
	})
	return fds[0], fds[1]
}

func faultQueue(t *testing.T, depth int, eventfd bool, f *faultyEnter) *uringQueue {
	t.Helper()
	q, err := openURingQueue(depth, eventfd, f.enter)
	if err != nil {
		t.Skip(err)
	}
	return q
}

func tempFile(t *testing.T, content []byte) int32 {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "file"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	return int32(f.Fd())
}

// TestURingSubmitFailure: io_uring_enter fails while a read is with the
// kernel and three more are queued behind the failing submission. The
// three fail with the errno, nothing queued is submitted later, new
// requests fail at once, the read the kernel had completes with its real
// result, and Close returns.
func TestURingSubmitFailure(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EBADF, syscall.ENOMEM, syscall.EFAULT} {
		for _, eventfd := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/eventfd=%v", errno, eventfd), func(t *testing.T) {
				testSubmitFailure(t, errno, eventfd)
			})
		}
	}
}

func testSubmitFailure(t *testing.T, errno syscall.Errno, eventfd bool) {
	f := newFaultyEnter()
	q := faultQueue(t, 4, eventfd, f)
	pr, pw := pendingPipe(t)
	file := tempFile(t, pattern(BlockSize, 1))

	pending := AlignedBuffer(BlockSize)
	consumed := goDo(q, uringOpRead, int32(pr), pending, 0)
	eventually(t, "the pipe read reaches the kernel", func() bool { return q.ring.sqHead.Load() == 1 })

	f.hold.Store(true)
	f.submitErr.Store(uintptr(errno))
	failing := []<-chan doResult{goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0)}
	select {
	case <-f.entered:
	case <-time.After(faultDeadline):
		t.Fatal("the submission never reached io_uring_enter")
	}
	for range 2 {
		failing = append(failing, goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0))
	}
	eventually(t, "the requests are queued", func() bool { return q.inflight.Load() == 4 })
	close(f.release)
	for i, c := range failing {
		r := await(t, "a request whose submission failed", c)
		if !errors.Is(r.err, errno) || !errors.Is(r.err, ErrEngineFailed) {
			t.Errorf("request %d: do = %d, %v; want ErrEngineFailed and %v", i, r.res, r.err, errno)
		}
	}
	if head, tail := q.ring.sqHead.Load(), q.ring.sqTail.Load(); head != 1 || tail != 1 || f.submits.Load() != 1 {
		t.Errorf("SQ head %d, tail %d, %d submissions; want the failed SQEs taken back", head, tail, f.submits.Load())
	}

	f.submitErr.Store(0) // the queue stays failed all the same
	later := await(t, "a request on the failed queue", goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0))
	if !errors.Is(later.err, ErrEngineFailed) || !errors.Is(later.err, errno) {
		t.Errorf("do after the failure = %d, %v; want ErrEngineFailed", later.res, later.err)
	}
	if f.submits.Load() != 1 {
		t.Errorf("%d submissions after the failure", f.submits.Load()-1)
	}

	if _, err := unix.Write(pw, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	r := await(t, "the read the kernel held", consumed)
	if r.err != nil || r.res != 5 || string(pending[:5]) != "hello" {
		t.Errorf("the consumed read = %d, %v, %q; want 5, nil, hello", r.res, r.err, pending[:5])
	}
	closeWithin(t, q)
}

// TestURingWaitFailure: waiting for completions fails (io_uring_enter
// without an eventfd, the eventfd read with one) while a read is with the
// kernel. A completion already posted is delivered; the read held by the
// kernel fails, its buffer kept; new requests fail at once; Close returns.
func TestURingWaitFailure(t *testing.T) {
	cases := []struct {
		name    string
		eventfd bool
		errno   syscall.Errno // injected into the wait; 0: close the eventfd
	}{
		{"enter-EFAULT", false, syscall.EFAULT},
		{"enter-EBADF", false, syscall.EBADF},
		{"enter-ENOMEM", false, syscall.ENOMEM},
		{"eventfd-closed", true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultyEnter()
			q := faultQueue(t, 4, c.eventfd, f)
			pr, _ := pendingPipe(t)
			file := tempFile(t, pattern(BlockSize, 2))

			pending := AlignedBuffer(BlockSize)
			held := goDo(q, uringOpRead, int32(pr), pending, 0)
			eventually(t, "the pipe read reaches the kernel", func() bool { return q.ring.sqHead.Load() == 1 })
			uringAbandoned.Lock()
			abandoned := len(uringAbandoned.bufs)
			uringAbandoned.Unlock()

			if c.errno != 0 {
				eventually(t, "the reaper waits in the kernel", func() bool { return f.waits.Load() >= 1 })
				f.waitErr.Store(uintptr(c.errno))
				// The reaper sits in a real wait: this read's completion
				// ends it, and the next wait fails.
				buf := AlignedBuffer(BlockSize)
				r := await(t, "a read completing as the wait fails", goDo(q, uringOpRead, file, buf, 0))
				if r.err != nil || r.res != BlockSize || !bytes.Equal(buf, pattern(BlockSize, 2)) {
					t.Errorf("completed read = %d, %v", r.res, r.err)
				}
			} else if err := q.ring.eventfd.Close(); err != nil {
				t.Fatal(err)
			}

			r := await(t, "the read the kernel held", held)
			if !errors.Is(r.err, ErrEngineFailed) || (c.errno != 0 && !errors.Is(r.err, c.errno)) {
				t.Errorf("held read = %d, %v; want ErrEngineFailed wrapping %v", r.res, r.err, c.errno)
			}
			if errors.Is(r.err, os.ErrClosed) {
				t.Errorf("held read = %v: reads as a closed drive", r.err)
			}
			uringAbandoned.Lock()
			kept := len(uringAbandoned.bufs) - abandoned
			uringAbandoned.Unlock()
			if kept != 1 {
				t.Errorf("%d buffers kept, want the held read's", kept)
			}
			later := await(t, "a request on the failed queue", goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0))
			if !errors.Is(later.err, ErrEngineFailed) {
				t.Errorf("do after the failure = %d, %v; want ErrEngineFailed", later.res, later.err)
			}
			closeWithin(t, q)
		})
	}
}

// TestURingCloseAfterSubmitFailure: with nothing in flight, a queue whose
// submission failed still closes, in either wait mode (the reaper is
// parked on the eventfd or the kick channel, not on a completion).
func TestURingCloseAfterSubmitFailure(t *testing.T) {
	for _, eventfd := range []bool{true, false} {
		t.Run(fmt.Sprintf("eventfd=%v", eventfd), func(t *testing.T) {
			f := newFaultyEnter()
			q := faultQueue(t, 2, eventfd, f)
			file := tempFile(t, pattern(BlockSize, 3))
			if r := await(t, "a read", goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0)); r.err != nil {
				t.Fatal(r.err)
			}
			f.submitErr.Store(uintptr(syscall.ENXIO))
			r := await(t, "a failing read", goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0))
			if !errors.Is(r.err, syscall.ENXIO) {
				t.Fatalf("do = %d, %v; want ENXIO", r.res, r.err)
			}
			closeWithin(t, q)
			if r := await(t, "a read after close", goDo(q, uringOpRead, file, AlignedBuffer(BlockSize), 0)); !errors.Is(r.err, ErrClosed) && !errors.Is(r.err, ErrEngineFailed) {
				t.Fatalf("do after close = %v", r.err)
			}
		})
	}
}

// TestFileDriveEngineFailure: a FileDrive whose ring fails reports I/O
// errors that mark the drive failed (ErrIO and ErrDriveFailed, with the
// cause), keeps failing, and closes.
func TestFileDriveEngineFailure(t *testing.T) {
	f := newFaultyEnter()
	saved := startURingQueue
	defer func() { startURingQueue = saved }()
	startURingQueue = func(depth int, eventfd bool) (*uringQueue, error) {
		return openURingQueue(depth, eventfd, f.enter)
	}
	d := openEngine(t, filepath.Join(t.TempDir(), "drive"), 16*BlockSize, FileOptions{Engine: EngineURing})
	mustWrite(t, d, pattern(BlockSize, 4), 0)
	f.submitErr.Store(uintptr(syscall.EIO))
	_, err := d.WriteAt(pattern(BlockSize, 5), BlockSize)
	for _, want := range []error{ErrIO, ErrDriveFailed, ErrEngineFailed, syscall.EIO} {
		if !errors.Is(err, want) {
			t.Errorf("WriteAt on a failed ring = %v; want it to wrap %v", err, want)
		}
	}
	f.submitErr.Store(0)
	if _, err := d.ReadAt(AlignedBuffer(BlockSize), 0); !errors.Is(err, ErrDriveFailed) || !errors.Is(err, ErrIO) {
		t.Errorf("ReadAt after the failure = %v; want ErrDriveFailed", err)
	}
	if err := d.Sync(); !errors.Is(err, ErrDriveFailed) || !errors.Is(err, ErrIO) {
		t.Errorf("Sync after the failure = %v; want ErrDriveFailed: a failed drive's sync is not durable", err)
	}
	if err := d.Discard(0, BlockSize); !errors.Is(err, ErrDriveFailed) {
		t.Errorf("Discard after the failure = %v; want ErrDriveFailed", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(faultDeadline):
		t.Fatal("Close hangs")
	}
}
