// Package pmem maps persistent memory and makes stores to it durable.
//
// A Region is a byte slice that the program writes with ordinary stores, plus
// one barrier, Persist(off, n), after which the bytes [off, off+n) survive a
// power loss. Nothing else is promised: a store that has not been covered by a
// returned Persist may reach the media in full, in part (in 8-byte aligned
// pieces, in any order), or not at all. Callers therefore checksum what they
// write and treat a record as valid only once its checksum verifies.
//
// # Modes
//
// OpenFile maps a file and reports how it persists (Region.Mode):
//
//   - ModeDAX: the file lives on a DAX filesystem (real persistent memory, or
//     an emulated NVDIMM) and the mapping was made with
//     MAP_SHARED_VALIDATE|MAP_SYNC, so the kernel keeps the file's metadata
//     durable for every page the program can store to. Persist writes back
//     each 64-byte cache line of the range (CLWB when the CPU has it, else
//     CLFLUSHOPT, else CLFLUSH) and ends with SFENCE; no system call. On
//     architectures without that assembly Persist falls back to msync.
//   - ModeMsync: any other filesystem, or any file opened with
//     OpenFileWith and FileOptions.Msync (a DAX one too, to compare). The
//     mapping is plain MAP_SHARED and Persist is msync(MS_SYNC) over the
//     page-aligned range.
//   - ModeVolatile: the file lives on tmpfs or ramfs, mapped MAP_SHARED. Its
//     pages are the file, so a store is in the file at once: Persist checks
//     the range and does nothing more (no msync). The bytes survive the
//     process, not the machine.
//     Development clusters use it; the daemon says so in its log.
//
// Fake is the in-memory Region for tests (ModeFake): it keeps a shadow of the
// persisted bytes and produces the image a power loss would leave, with seeded
// random fragments of the stores that were not persisted.
//
// # Concurrency
//
// Bytes may be written, and Persist called, from many goroutines at once, for
// disjoint ranges. Close must not run concurrently with either, and the slice
// returned by Bytes must not be used after Close.
package pmem
