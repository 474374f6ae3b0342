package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file is the kernel side of the io_uring engine: the structures the
// kernel shares with us (layouts in doc.go, "io_uring rings"), ring setup
// and teardown, and the two syscalls. uring_queue_linux.go builds the
// request queue on top.

// io_uring constants from include/uapi/linux/io_uring.h.
const (
	uringOffSQRing = 0          // IORING_OFF_SQ_RING: mmap offset of the SQ ring (and CQ ring)
	uringOffSQEs   = 0x10000000 // IORING_OFF_SQES: mmap offset of the SQE array

	uringOpRead  = 22 // IORING_OP_READ (Linux 5.6)
	uringOpWrite = 23 // IORING_OP_WRITE (Linux 5.6)

	uringEnterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	uringFeatSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP (5.4): one mmap for both rings
	uringFeatRWCurPos   = 1 << 3 // IORING_FEAT_RW_CUR_POS (5.6): the kernel knows OP_READ/OP_WRITE

	uringRegisterEventfd = 4 // IORING_REGISTER_EVENTFD
)

// uringSQOffsets is struct io_sqring_offsets: where, in the ring mapping,
// each field of the submission ring lives.
type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// uringCQOffsets is struct io_cqring_offsets.
type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringParams is struct io_uring_params (120 bytes), in and out of
// io_uring_setup.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

// uringSQE is struct io_uring_sqe (64 bytes), the fields a read and a
// write use.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	pad2        uint64
}

// uringCQE is struct io_uring_cqe (16 bytes).
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// Compile-time checks of the layouts above against the kernel ABI.
var (
	_ [120 - unsafe.Sizeof(uringParams{})]byte
	_ [unsafe.Sizeof(uringParams{}) - 120]byte
	_ [64 - unsafe.Sizeof(uringSQE{})]byte
	_ [unsafe.Sizeof(uringSQE{}) - 64]byte
	_ [16 - unsafe.Sizeof(uringCQE{})]byte
	_ [unsafe.Sizeof(uringCQE{}) - 16]byte
)

// ErrURingUnavailable is io_uring refused by the kernel (not built in,
// disabled by sysctl or seccomp, too old for IORING_OP_READ).
var ErrURingUnavailable = errors.New("disk: io_uring unavailable")

// uring is one io_uring instance: the ring file descriptor and the three
// shared arrays. Its methods do no locking; uringQueue serializes the
// submission side (sqTail, sqes) and the completion side (cqHead).
type uring struct {
	fd      int
	ringMem []byte // SQ and CQ rings, one mapping (IORING_FEAT_SINGLE_MMAP)
	sqeMem  []byte // the SQE array

	sqHead, sqTail *atomic.Uint32 // sqHead: kernel-owned; sqTail: ours
	sqMask         uint32
	sqes           []uringSQE
	cqHead, cqTail *atomic.Uint32 // cqHead: ours; cqTail: kernel-owned
	cqMask         uint32
	cqes           []uringCQE

	// localTail is sqTail's value as we last stored it: only the submission
	// side writes it, so it need not be read back from shared memory.
	localTail uint32
	eventfd   *os.File // signalled on every completion batch; nil without

	// enterFn is io_uring_enter: uringEnterSyscall, or a fault injector in
	// tests. Set before the ring is shared and never changed.
	enterFn uringEnterFunc
}

// uringEnterFunc is the io_uring_enter system call on ring descriptor fd:
// it returns the syscall's result and its errno (0 on success).
type uringEnterFunc func(fd int, toSubmit, minComplete, flags uint32) (int, syscall.Errno)

// uringEnterSyscall is the real io_uring_enter. Without
// IORING_ENTER_GETEVENTS it is a raw system call: submitting does not block
// (the kernel punts a request that would to its workers), so the goroutine
// keeps its P and the scheduler is not involved. Waiting for completions
// blocks, so that goes through the scheduler.
func uringEnterSyscall(fd int, toSubmit, minComplete, flags uint32) (int, syscall.Errno) {
	if flags&uringEnterGetEvents == 0 {
		n, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
			uintptr(minComplete), uintptr(flags), 0, 0)
		return int(n), errno
	}
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
		uintptr(minComplete), uintptr(flags), 0, 0)
	return int(n), errno
}

// newURing sets up a ring of at least entries submission slots (a power of
// two) and maps it. With eventfd it also registers an eventfd that the
// kernel signals when it posts completions, so a goroutine can wait for
// them in Go's netpoller instead of in a blocking io_uring_enter. enter is
// the ring's io_uring_enter (uringEnterSyscall outside tests).
func newURing(entries uint32, eventfd bool, enter uringEnterFunc) (*uring, error) {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %w", ErrURingUnavailable, errno)
	}
	r := &uring{fd: int(fd), enterFn: enter}
	if p.features&uringFeatSingleMmap == 0 || p.features&uringFeatRWCurPos == 0 {
		r.close()
		return nil, fmt.Errorf("%w: kernel features %#x lack SINGLE_MMAP or RW_CUR_POS (Linux < 5.6)",
			ErrURingUnavailable, p.features)
	}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	if eventfd {
		if err := r.registerEventfd(); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// mmap maps the rings and the SQE array and resolves the field pointers.
func (r *uring) mmap(p *uringParams) error {
	ringSize := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	var err error
	r.ringMem, err = unix.Mmap(r.fd, uringOffSQRing, int(ringSize),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("%w: mapping the rings: %w", ErrURingUnavailable, err)
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(uringSQE{}))
	r.sqeMem, err = unix.Mmap(r.fd, uringOffSQEs, sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("%w: mapping the SQE array: %w", ErrURingUnavailable, err)
	}
	r.sqHead, r.sqTail = r.u32(p.sqOff.head), r.u32(p.sqOff.tail)
	r.sqMask = r.u32(p.sqOff.ringMask).Load()
	r.cqHead, r.cqTail = r.u32(p.cqOff.head), r.u32(p.cqOff.tail)
	r.cqMask = r.u32(p.cqOff.ringMask).Load()
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.ringMem[p.cqOff.cqes])), p.cqEntries)
	// The SQ array maps ring positions to SQE indexes; identity, set once.
	array := unsafe.Slice((*uint32)(unsafe.Pointer(&r.ringMem[p.sqOff.array])), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.localTail = r.sqTail.Load()
	return nil
}

// u32 returns the shared 32-bit word at off in the ring mapping, accessed
// atomically (the ring protocol's acquire/release: Go's atomics are
// sequentially consistent, which is stronger).
func (r *uring) u32(off uint32) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.ringMem[off]))
}

func (r *uring) registerEventfd() error {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: eventfd: %w", ErrURingUnavailable, err)
	}
	arg := int32(efd)
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), uringRegisterEventfd,
		uintptr(unsafe.Pointer(&arg)), 1, 0, 0)
	if errno != 0 {
		_ = unix.Close(efd)
		return fmt.Errorf("%w: registering the eventfd: %w", ErrURingUnavailable, errno)
	}
	// A non-blocking descriptor: os.NewFile puts it in the netpoller.
	r.eventfd = os.NewFile(uintptr(efd), "io_uring-eventfd")
	return nil
}

// signalEventfd adds one to the eventfd's counter, waking a goroutine
// parked reading it, as a completion would. Errors are ignored: an eventfd
// that cannot be written cannot be read either, and its reader then fails.
func (r *uring) signalEventfd() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = r.eventfd.Write(one[:])
}

// close unmaps the ring and closes its descriptors. No request may be in
// flight whose buffer can be reused: the kernel would go on writing into
// buffers it was given (uringQueue keeps those of abandoned requests).
func (r *uring) close() {
	if r.eventfd != nil {
		_ = r.eventfd.Close()
	}
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.ringMem != nil {
		_ = unix.Munmap(r.ringMem)
	}
	r.sqes, r.cqes, r.ringMem, r.sqeMem = nil, nil, nil, nil
	_ = unix.Close(r.fd)
}

// sqeFree returns how many SQEs can be queued now.
func (r *uring) sqeFree() uint32 {
	return uint32(len(r.sqes)) - (r.localTail - r.sqHead.Load())
}

// queue fills the next SQE and publishes it to the kernel; the caller has
// checked sqeFree. The SQE is visible to the kernel after the tail store,
// and submitted by the next io_uring_enter.
func (r *uring) queue(opcode uint8, fd int32, addr unsafe.Pointer, n uint32, off int64, userData uint64) {
	sqe := &r.sqes[r.localTail&r.sqMask]
	*sqe = uringSQE{opcode: opcode, fd: fd, off: uint64(off), addr: uint64(uintptr(addr)),
		len: n, userData: userData}
	r.localTail++
	r.sqTail.Store(r.localTail)
}

// unsubmitted returns how many published SQEs the kernel has not consumed.
func (r *uring) unsubmitted() uint32 { return r.localTail - r.sqHead.Load() }

// rewind takes back the published SQEs that the kernel has not consumed:
// it calls f with the user_data of each, oldest first, and moves the SQ
// tail back to the kernel's head, so no later io_uring_enter submits them.
// No io_uring_enter may be submitting meanwhile (one that only waits for
// completions reads no SQE).
func (r *uring) rewind(f func(userData uint64)) {
	head := r.sqHead.Load()
	for i := head; i != r.localTail; i++ {
		f(r.sqes[i&r.sqMask].userData)
	}
	r.localTail = head
	r.sqTail.Store(head)
}

// submit calls io_uring_enter to submit n SQEs without waiting, retrying
// on EINTR. It returns the errno, 0 on success; the SQ head says how many
// SQEs the kernel consumed.
func (r *uring) submit(n uint32) syscall.Errno {
	for {
		if _, errno := r.enterFn(r.fd, n, 0, 0); errno != syscall.EINTR {
			return errno
		}
	}
}

// wait calls io_uring_enter to wait until at least one completion is
// posted, retrying on EINTR (Go's preemption signals interrupt a waiting
// enter often). It returns the errno, 0 on success.
func (r *uring) wait() syscall.Errno {
	for {
		if _, errno := r.enterFn(r.fd, 0, 1, uringEnterGetEvents); errno != syscall.EINTR {
			return errno
		}
	}
}

// reap calls f for every posted completion and then releases them to the
// kernel; it returns how many it reaped.
func (r *uring) reap(f func(userData uint64, res int32)) int {
	head, tail := r.cqHead.Load(), r.cqTail.Load()
	for i := head; i != tail; i++ {
		c := &r.cqes[i&r.cqMask]
		f(c.userData, c.res)
	}
	r.cqHead.Store(tail)
	return int(tail - head)
}
