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
package disk
