package bench

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// VerifyUnit is the granule of data verification: every 4 KiB of every
// verified write carries a header (see the package documentation).
const VerifyUnit = 4096

const verifyHeaderSize = 64

var (
	verifyMagic = [8]byte{'B', 'S', 'L', 'T', 'V', 'R', 'F', 'Y'}
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
	zeroCRC     [4]byte
)

// Unit check outcomes other than a valid stamp.
const (
	reasonNotStamped = "no verify header (never written by basalt-bench)"
	reasonLBA        = "header names another LBA (misdirected write or read)"
	reasonChecksum   = "checksum mismatch (corrupt or torn)"
	reasonSeed       = "written by another run (different seed)"
	reasonOlder      = "older generation than acknowledged (lost write)"
	reasonUnknown    = "generation that was never submitted"
)

// VerifyError is a 4 KiB unit whose content is not acceptable.
type VerifyError struct {
	LBA    uint64 // device LBA of the unit
	Want   uint64 // generation last acknowledged (0: none)
	Got    uint64 // generation the unit holds (0 if unreadable)
	Reason string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("bench: verify: LBA %d: %s (acknowledged generation %d, found %d)", e.LBA, e.Reason, e.Want, e.Got)
}

// Unwrap returns ErrVerify.
func (e *VerifyError) Unwrap() error { return ErrVerify }

// stampUnit fills the VerifyUnit bytes of b as generation gen of the unit
// at lba: header, then a payload derived from (seed, lba, gen), then the
// checksum. It does not allocate.
func stampUnit(b []byte, lba, gen, seed uint64) {
	b = b[:VerifyUnit]
	copy(b[0:8], verifyMagic[:])
	binary.LittleEndian.PutUint64(b[8:], lba)
	binary.LittleEndian.PutUint64(b[16:], gen)
	binary.LittleEndian.PutUint64(b[24:], seed)
	clear(b[32:verifyHeaderSize])
	x := seed ^ lba*0x9E3779B97F4A7C15 ^ gen*0xD1B54A32D192ED03
	fillXorshift(b[verifyHeaderSize:VerifyUnit], splitmix(&x))
	binary.LittleEndian.PutUint32(b[32:], unitCRC(b))
}

// unitCRC is the CRC32C of the unit with the checksum field as zeros.
func unitCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[:32])
	c = crc32.Update(c, castagnoli, zeroCRC[:])
	return crc32.Update(c, castagnoli, b[36:VerifyUnit])
}

// readUnit returns the generation a unit read from lba holds, or a reason
// why it holds no valid stamp of this run.
func readUnit(b []byte, lba, seed uint64) (gen uint64, reason string) {
	b = b[:VerifyUnit]
	if [8]byte(b[0:8]) != verifyMagic {
		return 0, reasonNotStamped
	}
	if binary.LittleEndian.Uint32(b[32:]) != unitCRC(b) {
		return 0, reasonChecksum
	}
	gen = binary.LittleEndian.Uint64(b[16:])
	if binary.LittleEndian.Uint64(b[8:]) != lba {
		return gen, reasonLBA
	}
	if binary.LittleEndian.Uint64(b[24:]) != seed {
		return gen, reasonSeed
	}
	return gen, ""
}

// judgeUnit decides whether a unit read from lba is acceptable given the
// generation last acknowledged for it (0: none) and the generations that
// were in flight (submitted, not acknowledged) when the writer stopped. A
// unit may hold the acknowledged generation or a newer one in flight, never
// an older one; a unit with nothing acknowledged may hold anything.
func judgeUnit(b []byte, lba, seed, acked uint64, inflight []uint64) (got uint64, err *VerifyError) {
	got, reason := readUnit(b, lba, seed)
	switch {
	case reason != "" && acked == 0:
		return 0, nil
	case reason != "":
		return got, &VerifyError{LBA: lba, Want: acked, Got: got, Reason: reason}
	case got == acked:
		return got, nil
	}
	for _, g := range inflight {
		if g == got && g > acked {
			return got, nil
		}
	}
	if got < acked {
		return got, &VerifyError{LBA: lba, Want: acked, Got: got, Reason: reasonOlder}
	}
	return got, &VerifyError{LBA: lba, Want: acked, Got: got, Reason: reasonUnknown}
}

// splitmix is SplitMix64: a fast, allocation-free generator.
func splitmix(x *uint64) uint64 {
	*x += 0x9E3779B97F4A7C15
	z := *x
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// fillRandom fills b with pseudo-random bytes (unverified writes carry
// incompressible, non-zero data).
func fillRandom(b []byte, seed uint64) { fillXorshift(b, splitmix(&seed)) }

// fillXorshift fills whole 8-byte words of b from Marsaglia's xorshift64
// started at x (a zero start is replaced): cheap enough to stamp every
// verified write.
func fillXorshift(b []byte, x uint64) {
	if x == 0 {
		x = 0x9E3779B97F4A7C15
	}
	for off := 0; off+8 <= len(b); off += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[off:], x)
	}
}
