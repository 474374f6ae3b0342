package disk

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"basalt/pkg/identity"
)

// UUID identifies a drive or a node for all time (RFC 9562 layout, version 4
// when made by NewUUID). The zero UUID means "unset" and is never valid in a
// superblock.
type UUID [16]byte

// NewUUID returns a random version-4 UUID from crypto/rand.
func NewUUID() UUID {
	var u UUID
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails (Go 1.24+)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// ParseUUID parses the canonical 36-character form
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (either case).
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("disk: malformed UUID %q", s)
	}
	digits := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return UUID{}, fmt.Errorf("disk: malformed UUID %q: %w", s, err)
	}
	return u, nil
}

// String returns the canonical lower-case form.
func (u UUID) String() string { return identity.Format(u) }

// IsZero reports whether u is the zero (unset) UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// DriveIndex is a drive's position among its node's drives, as recorded in
// its superblock: the column of the drive in the node's stripes.
type DriveIndex uint32

func (i DriveIndex) String() string { return "drive" + strconv.FormatUint(uint64(i), 10) }
