// Package loopback holds the loopback benchmark: Basalt's NVMe/TCP host
// library against the real target on a memory backend over loopback TCP
// (BenchmarkBasalt), side by side with a minimal Go request/response program
// that moves the same bytes over the same number of TCP connections at the
// same depth (BenchmarkCeiling). The ratio of the two is how much of what Go
// and the kernel's loopback can do that Basalt's NVMe/TCP stack delivers.
// See README.md for how to run it and read the result.
//
// The ceiling protocol, per I/O:
//
//	request  (host -> server): 64 bytes, + 4096 payload for a write
//	   0 op (1: read, 2: write)   1..3 reserved   4 tag (LE32)
//	   8 LBA (LE64)               16..63 reserved
//	response (server -> host): 16 bytes, + 4096 payload for a read
//	   0 tag (LE32)   4 status (LE32, 0)   8..15 reserved
//
// which mirrors NVMe/TCP's 72-byte CapsuleCmd (+ in-capsule data) and 24-byte
// CapsuleResp (+ a 24-byte C2HData header) closely enough that the
// difference measures protocol processing, not bytes on the wire.
package loopback
