// Package disk is Basalt's view of a drive: the Drive interface, its
// implementations, and the superblock that identifies a drive.
//
// # Drives
//
//   - FileDrive (OpenFile): a regular file or a block device, opened with
//     O_DIRECT where the filesystem allows it, buffered with fdatasync where
//     it does not. The production drive.
//   - MemDrive (NewMem): memory, with a durable image as of the last Sync
//     and a record of unsynced writes, so CrashClone can produce what a power
//     loss might leave behind. The test drive.
//   - FaultDrive (NewFault): wraps any Drive and injects I/O errors,
//     latency, bit flips on read, misdirected and torn writes, and the loss of
//     the whole drive, by seeded probability or by scripted Rule.
//
// Every Drive does I/O in BlockSize (4096-byte) units from BlockSize-aligned
// buffers; AlignedBuffer allocates them. MemDrive and FaultDrive enforce the
// same alignment as O_DIRECT, so code tested on them runs on real drives.
//
// # Drive layout
//
// The first ReservedSize bytes (1 MiB) of a drive belong to this package;
// the data region starts at ReservedSize and runs to Size().
//
//	offset           size        content
//	0                4096        superblock copy 0
//	4096             4096        superblock copy 1
//	8192             1 MiB-8192  reserved, zero
//	1 MiB            Size-1 MiB  data (owned by the segment store)
//
// # Superblock format (version 1)
//
// Both copies are identical when written. All integers are little-endian.
//
//	offset  size  field
//	------  ----  ------------------------------------------------------
//	     0     8  magic "BASALTSB"
//	     8     4  format version (uint32) = 1
//	    12     4  block size in bytes (uint32), a power of two, 512..1 MiB
//	    16    16  drive UUID (never zero)
//	    32    16  node UUID
//	    48     4  drive index (uint32): the drive's column in its node
//	    52     4  reserved, zero
//	    56     8  drive size in bytes at format time (uint64), a multiple
//	              of the block size
//	    64     8  generation (uint64): higher wins between the two copies
//	    72  4020  reserved, zero
//	  4092     4  CRC32C (Castagnoli) of bytes 0..4091
//
// Reading checks, per copy: magic (otherwise the copy is absent), checksum
// (covers everything before it, reserved bytes included), version, that
// reserved bytes are zero, and the field ranges above. ReadSuperblock returns
// the valid copy with the highest generation. WriteSuperblock writes copy 0,
// syncs, writes copy 1, syncs: a crash at any point leaves one valid copy.
//
// A new format version may use reserved bytes; this code refuses any version
// but 1 with ErrUnsupportedVersion rather than guess.
//
// # I/O engines
//
// A FileDrive issues ReadAt and WriteAt through io_uring (Linux 5.6 or
// later, where io_uring_setup is allowed) or through blocking pread/pwrite;
// OpenFile picks io_uring where it can (FileOptions.Engine chooses). A
// blocking pread holds an OS thread, and costs a thread switch, per request
// in flight; io_uring submits many requests in one system call and parks
// the waiting goroutines instead.
//
// One ring per drive (uring_linux.go, uring_queue_linux.go). Goroutines
// take one of URingDepth slots, queue an SQE whose user_data is the slot
// index, and park on the slot; the first of them not finding a submitter at
// work calls io_uring_enter for everything queued. A reaper goroutine waits
// on an eventfd registered with the ring (in Go's netpoller, holding no OS
// thread), reaps the CQEs and wakes each slot's goroutine. The slot keeps
// a reference to the buffer until its CQE is reaped. Close wakes the
// reaper itself (an eventfd write, or a channel when the reaper waits in
// io_uring_enter, which it does only while the kernel owes it a CQE), so
// closing needs no submission and cannot hang on a ring that stopped
// taking them.
//
// A kernel or ring error never crashes the node: io_uring_enter failing
// with anything but EINTR, EAGAIN or EBUSY, or the eventfd failing, breaks
// the drive's queue (ErrEngineFailed), and ReadAt and WriteAt fail from
// then on with ErrIO wrapping ErrDriveFailed, so the store marks the drive
// failed. If submitting failed, the SQEs the kernel did not consume are
// taken back (the SQ tail rewound to the kernel's head) and their requests
// fail with the errno, while those it consumed complete with their real
// results. If waiting for completions failed, the ring can no longer say
// when the kernel is done with a buffer: the requests still waiting fail,
// and their buffers are kept referenced for the life of the process so the
// memory is never reused by the runtime; their callers must drop them, as
// the kernel may still write into them.
//
// # io_uring shared memory (the kernel ABI this package relies on)
//
// io_uring_setup(entries, params) fills struct io_uring_params (120 bytes)
// with the offsets of the ring fields; both rings share one mapping at
// offset 0 of the ring descriptor (IORING_FEAT_SINGLE_MMAP, required), the
// SQE array is mapped at offset 0x10000000. All integers are native endian.
//
//	io_uring_params  offset  size  field
//	                      0     4  sq_entries (out: a power of two)
//	                      4     4  cq_entries (out: 2 * sq_entries)
//	                      8     4  flags (in: 0)
//	                     12    16  sq_thread_cpu, sq_thread_idle, features, wq_fd
//	                     28    12  reserved
//	                     40    40  sq_off: head, tail, ring_mask, ring_entries,
//	                               flags, dropped, array (u32 each), resv1 (u32),
//	                               user_addr (u64)
//	                     80    40  cq_off: head, tail, ring_mask, ring_entries,
//	                               overflow, cqes, flags, resv1 (u32 each),
//	                               user_addr (u64)
//
// Ring mapping: u32 words at the sq_off/cq_off offsets. We write the SQ
// tail and the CQ head; the kernel writes the SQ head and the CQ tail. Each
// side stores its index after writing the entries it covers and loads the
// other's before reading them (acquire/release; Go's atomics are stronger).
// The SQ array at sq_off.array maps ring positions to SQE indexes; it is
// set to the identity once. CQEs start at cq_off.cqes.
//
//	SQE (64 bytes)   offset  size  field
//	                      0     1  opcode: 22 READ, 23 WRITE
//	                      1     1  flags (0)
//	                      2     2  ioprio (0)
//	                      4     4  fd (int32)
//	                      8     8  offset in the file (u64)
//	                     16     8  buffer address (u64)
//	                     24     4  length in bytes (u32)
//	                     28     4  rw_flags (0)
//	                     32     8  user_data: slot index
//	                     40    24  buf_index, personality, file_index, addr3,
//	                               pad (0)
//
//	CQE (16 bytes)   offset  size  field
//	                      0     8  user_data, copied from the SQE
//	                      8     4  res (int32): bytes transferred, or -errno
//	                     12     4  flags (ignored)
package disk
