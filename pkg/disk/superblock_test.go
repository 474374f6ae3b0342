package disk

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

const superblockTestDriveSize = 2 * ReservedSize

func testSuperblock() Superblock {
	return Superblock{
		DriveUUID:  UUID{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x47, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01},
		NodeUUID:   UUID{0xde, 0xad, 0xbe, 0xef, 1, 2, 0x43, 4, 0x85, 6, 7, 8, 9, 10, 11, 12},
		DriveIndex: 3,
		Generation: 1,
	}
}

// corruptByte flips one byte of the drive at off.
func corruptByte(t *testing.T, d Drive, off int64) {
	t.Helper()
	block := mustRead(t, d, BlockSize, off-off%BlockSize)
	block[off%BlockSize] ^= 0xff
	mustWrite(t, d, block, off-off%BlockSize)
}

func TestSuperblockRoundTripFillsDefaults(t *testing.T) {
	d := NewMem(superblockTestDriveSize)
	if err := WriteSuperblock(d, testSuperblock()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSuperblock(d)
	if err != nil {
		t.Fatal(err)
	}
	want := testSuperblock()
	want.Version, want.BlockSize, want.DriveSize = FormatVersion, BlockSize, superblockTestDriveSize
	if got != want {
		t.Fatalf("read %+v, want %+v", got, want)
	}
	if d.UnsyncedBlocks() != 0 {
		t.Fatal("WriteSuperblock left unsynced writes")
	}
}

func TestReadSuperblockFallsBackToTheValidCopy(t *testing.T) {
	tests := []struct {
		name      string
		corrupt   []int64 // byte offsets to damage
		wantError error
	}{
		{"copy 0 checksum", []int64{20}, nil},
		{"copy 1 checksum", []int64{SuperblockSize + 20}, nil},
		{"copy 0 stored checksum", []int64{superblockCRCStart}, nil},
		{"both copies", []int64{20, SuperblockSize + 40}, ErrCorruptSuperblock},
		{"both magics", []int64{0, SuperblockSize}, ErrNoSuperblock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewMem(superblockTestDriveSize)
			if err := WriteSuperblock(d, testSuperblock()); err != nil {
				t.Fatal(err)
			}
			for _, off := range tt.corrupt {
				corruptByte(t, d, off)
			}
			got, err := ReadSuperblock(d)
			if tt.wantError != nil {
				if !errors.Is(err, tt.wantError) {
					t.Fatalf("error %v, want %v", err, tt.wantError)
				}
				return
			}
			if err != nil || got.DriveUUID != testSuperblock().DriveUUID {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func TestReadSuperblockOnUnformattedDrive(t *testing.T) {
	if _, err := ReadSuperblock(NewMem(superblockTestDriveSize)); !errors.Is(err, ErrNoSuperblock) {
		t.Fatalf("zeroed drive: %v, want ErrNoSuperblock", err)
	}
	if _, err := ReadSuperblock(NewMem(ReservedSize / 2)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("tiny drive: %v, want ErrOutOfRange", err)
	}
}

// A rewrite with a higher generation wins; a crash during the rewrite leaves
// either the old or the new superblock readable, never neither.
func TestSuperblockRewriteIsCrashSafe(t *testing.T) {
	old, next := testSuperblock(), testSuperblock()
	next.Generation, next.DriveIndex = 2, 7
	for failAt := range 4 { // fail the n-th write or sync of the rewrite
		inner := NewMem(superblockTestDriveSize)
		if err := WriteSuperblock(inner, old); err != nil {
			t.Fatal(err)
		}
		rules := []Rule{{Op: OpWrite, Fault: FaultTorn, Skip: failAt / 2, Count: 1}}
		if failAt%2 == 1 {
			rules = []Rule{{Op: OpSync, Fault: FaultError, Skip: failAt / 2, Count: 1}}
		}
		d := NewFault(inner, FaultOptions{Rules: rules}, int64(failAt))
		_ = WriteSuperblock(d, next) // may fail; the point is what is left
		for seed := range int64(8) {
			got, err := ReadSuperblock(inner.CrashClone(seed, 50))
			if err != nil {
				t.Fatalf("fail at %d, seed %d: %v", failAt, seed, err)
			}
			if got.Generation != old.Generation && got.Generation != next.Generation {
				t.Fatalf("fail at %d: generation %d", failAt, got.Generation)
			}
		}
	}
	d := NewMem(superblockTestDriveSize)
	WriteSuperblock(d, old)
	WriteSuperblock(d, next)
	if got, err := ReadSuperblock(d); err != nil || got.DriveIndex != 7 {
		t.Fatalf("after rewrite: %+v, %v", got, err)
	}
}

func TestSuperblockMustMatchTheDrive(t *testing.T) {
	d := NewMem(superblockTestDriveSize)
	tests := []struct {
		name   string
		modify func(*Superblock)
		want   error
	}{
		{"zero drive UUID", func(sb *Superblock) { sb.DriveUUID = UUID{} }, ErrCorruptSuperblock},
		{"other block size", func(sb *Superblock) { sb.BlockSize = 512 }, ErrCorruptSuperblock},
		{"bigger than drive", func(sb *Superblock) { sb.DriveSize = 2 * superblockTestDriveSize }, ErrOutOfRange},
		{"future version", func(sb *Superblock) { sb.Version = 2 }, ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		sb := testSuperblock()
		tt.modify(&sb)
		if err := WriteSuperblock(d, sb); !errors.Is(err, tt.want) {
			t.Errorf("%s: WriteSuperblock error %v, want %v", tt.name, err, tt.want)
		}
	}
	// Format a large drive, then mount a smaller image of it.
	big := NewMem(superblockTestDriveSize)
	WriteSuperblock(big, testSuperblock())
	small := NewMem(superblockTestDriveSize / 2)
	mustWrite(t, small, mustRead(t, big, ReservedSize, 0), 0)
	if _, err := ReadSuperblock(small); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("shrunken drive: %v, want ErrOutOfRange", err)
	}
}

// encodeRaw returns a valid superblock block after modify has changed its
// bytes, with the checksum recomputed unless keepSum.
func encodeRaw(modify func(b []byte), keepSum bool) []byte {
	sb := testSuperblock()
	sb.Version, sb.BlockSize, sb.DriveSize = FormatVersion, BlockSize, superblockTestDriveSize
	b := make([]byte, SuperblockSize)
	encodeSuperblock(b, sb)
	modify(b)
	if !keepSum {
		binary.LittleEndian.PutUint32(b[superblockCRCStart:], crc32.Checksum(b[:superblockCRCStart], castagnoli))
	}
	return b
}

func TestDecodeSuperblockRejectsMalformedInput(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty", nil, ErrCorruptSuperblock},
		{"short", make([]byte, SuperblockSize-1), ErrCorruptSuperblock},
		{"long", make([]byte, SuperblockSize+1), ErrCorruptSuperblock},
		{"zeros", make([]byte, SuperblockSize), ErrNoSuperblock},
		{"bad magic", encodeRaw(func(b []byte) { b[3] = 'x' }, false), ErrNoSuperblock},
		{"bad checksum", encodeRaw(func(b []byte) { b[100] = 1 }, true), ErrCorruptSuperblock},
		{"version 0", encodeRaw(func(b []byte) { b[8] = 0 }, false), ErrUnsupportedVersion},
		{"version 2 using reserved bytes", encodeRaw(func(b []byte) { b[8], b[100] = 2, 1 }, false), ErrUnsupportedVersion},
		{"reserved word set", encodeRaw(func(b []byte) { b[53] = 1 }, false), ErrCorruptSuperblock},
		{"reserved tail set", encodeRaw(func(b []byte) { b[4091] = 1 }, false), ErrCorruptSuperblock},
		{"block size not a power of two", encodeRaw(func(b []byte) { b[12] = 1 }, false), ErrCorruptSuperblock},
		{"block size too small", encodeRaw(func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 256) }, false), ErrCorruptSuperblock},
		{"zero drive UUID", encodeRaw(func(b []byte) { clear(b[16:32]) }, false), ErrCorruptSuperblock},
		{"drive size unaligned", encodeRaw(func(b []byte) { b[56] = 1 }, false), ErrCorruptSuperblock},
		{"drive size negative", encodeRaw(func(b []byte) { b[63] = 0x80 }, false), ErrCorruptSuperblock},
	}
	for _, tt := range tests {
		if _, err := decodeSuperblock(tt.input); !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := decodeSuperblock(encodeRaw(func([]byte) {}, false)); err != nil {
		t.Fatalf("valid input rejected: %v", err)
	}
}

// FuzzDecodeSuperblock checks that decoding never panics, that whatever
// decodes re-encodes to the same bytes, and, by fixing up the checksum, that
// the field checks behind it are reached too.
func FuzzDecodeSuperblock(f *testing.F) {
	f.Add(encodeRaw(func([]byte) {}, false))
	f.Add(encodeRaw(func(b []byte) { b[8] = 2 }, false))
	f.Add(encodeRaw(func(b []byte) { b[100] = 1 }, true))
	f.Add(make([]byte, SuperblockSize))
	f.Add([]byte("BASALTSB"))
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(input []byte) {
			sb, err := decodeSuperblock(input)
			if err != nil {
				if !errors.Is(err, ErrNoSuperblock) && !errors.Is(err, ErrCorruptSuperblock) &&
					!errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("unclassified error %v", err)
				}
				return
			}
			again := make([]byte, SuperblockSize)
			encodeSuperblock(again, sb)
			if string(again) != string(input) {
				t.Fatal("decoded superblock does not re-encode to its input")
			}
		}
		check(data)
		if len(data) == SuperblockSize {
			fixed := append([]byte(nil), data...)
			copy(fixed, superblockMagic)
			binary.LittleEndian.PutUint32(fixed[superblockCRCStart:],
				crc32.Checksum(fixed[:superblockCRCStart], castagnoli))
			check(fixed)
		}
	})
}

func TestUUIDStringParseRoundTrip(t *testing.T) {
	u := NewUUID()
	if u.IsZero() || u[6]>>4 != 4 || u[8]>>6 != 2 {
		t.Fatalf("NewUUID() = %v is not a version-4 UUID", u)
	}
	if NewUUID() == u {
		t.Fatal("two NewUUID calls returned the same UUID")
	}
	parsed, err := ParseUUID(u.String())
	if err != nil || parsed != u {
		t.Fatalf("ParseUUID(%q) = %v, %v", u.String(), parsed, err)
	}
	const canonical = "123e4567-e89b-42d3-a456-426614174000"
	if p, err := ParseUUID("123E4567-E89B-42D3-A456-426614174000"); err != nil || p.String() != canonical {
		t.Fatalf("upper case: %v, %v", p, err)
	}
	for _, bad := range []string{"", canonical[:35], "123e4567xe89b-42d3-a456-426614174000",
		"123e4567-e89b-42d3-a456-42661417400g", canonical + "0"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", bad)
		}
	}
	if DriveIndex(3).String() != "drive3" {
		t.Fatal("DriveIndex.String")
	}
}
