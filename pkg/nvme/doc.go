// Package nvme holds the wire formats shared by the NVMe/TCP target and the
// host library: PDU headers (NVMe/TCP Transport 1.0), submission and
// completion queue entries, status codes, Identify data structures and log
// pages. It performs no I/O; every type encodes to and decodes from caller
// buffers without allocating. All multi-byte fields are little-endian.
//
// PDU common header (NVMe/TCP 1.0 §3.6.1), 8 bytes, at the start of every PDU:
//
//	+--------+--------+--------+--------+--------+--------+--------+--------+
//	| 0 type | 1 flags| 2 HLEN | 3 PDO  |           4..7 PLEN (LE32)        |
//	+--------+--------+--------+--------+--------+--------+--------+--------+
//
//	type   PDU type (even = host to controller, odd = controller to host)
//	flags  bit0 HDGSTF, bit1 DDGSTF, bit2 LAST_PDU, bit3 SUCCESS
//	HLEN   header length, not counting the header digest
//	PDO    offset of the data from the start of the PDU (0 without data)
//	PLEN   total length: header [+HDGST] [+pad] [+data] [+DDGST]
//
// PDU layout on the wire:
//
//	| header (HLEN) | HDGST (4, opt) | pad to PDO | data | DDGST (4, opt) |
//
// Submission queue entry (NVMe Base 2.0 §4.2), 64 bytes, at offset 8 of a
// CapsuleCmd PDU:
//
//	 0  CDW0: opcode(1) flags(1: FUSE bits 1:0, PSDT bits 7:6) CID(2)
//	 4  NSID (4)            (fabrics commands: byte 4 = FCTYPE)
//	 8  CDW2, CDW3 (8)
//	16  MPTR (8)
//	24  DPTR: SGL descriptor: address(8) length(4) reserved(3) SGL id(1)
//	40  CDW10 .. CDW15 (6 x 4)
//
// Completion queue entry (NVMe Base 2.0 §4.2.1), 16 bytes, at offset 8 of a
// CapsuleResp PDU:
//
//	 0  DW0 (4)  command specific
//	 4  DW1 (4)  command specific
//	 8  SQHD (2) SQID (2)
//	12  CID (2)  status (2): bit0 phase, bits 8:1 SC, 11:9 SCT, 13:12 CRD,
//	             bit14 M, bit15 DNR
package nvme
