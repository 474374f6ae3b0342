package volume

import (
	"encoding/binary"
	"fmt"

	"basalt/replication"
)

// A volume's log entries are operations on its blocks (doc.go,
// "Operations"): a 24-byte header, then the data of a write; a repair has
// its base index between the two.
const (
	opVersion    = 1
	opHeaderSize = 24
	repairBase   = 8 // the repair's base index, after the header
)

// opKind is what an operation does.
type opKind uint8

const (
	opWrite       opKind = 1
	opTrim        opKind = 2
	opWriteZeroes opKind = 3
	// opRepair rewrites a range with the value another replica read as of
	// a base index, where no entry since has changed it (repair.go).
	opRepair opKind = 4
	// opSnapshot, opDeleteSnapshot and opRollback take, delete and roll the
	// volume back to the snapshot their data names (snapops.go).
	opSnapshot       opKind = 5
	opDeleteSnapshot opKind = 6
	opRollback       opKind = 7
)

func (k opKind) String() string {
	switch k {
	case opWrite:
		return "write"
	case opTrim:
		return "trim"
	case opWriteZeroes:
		return "write-zeroes"
	case opRepair:
		return "repair"
	case opSnapshot:
		return "snapshot"
	case opDeleteSnapshot:
		return "delete-snapshot"
	case opRollback:
		return "rollback"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// op is a decoded operation; data aliases the entry.
type op struct {
	kind   opKind
	offset int64
	length int64
	data   []byte
	base   uint64 // repair only: the index data is the value as of
}

// encodeOp returns a proposal entry holding the operation:
// replication.ProposalHeaderSize bytes left for the group, the op header,
// and a copy of data (writes only).
func encodeOp(kind opKind, offset, length int64, data []byte) []byte {
	b := make([]byte, replication.ProposalHeaderSize+opHeaderSize+len(data))
	h := b[replication.ProposalHeaderSize:]
	h[0] = opVersion
	h[1] = byte(kind)
	binary.LittleEndian.PutUint64(h[8:], uint64(offset))
	binary.LittleEndian.PutUint64(h[16:], uint64(length))
	copy(h[opHeaderSize:], data)
	return b
}

// encodeRepair returns a proposal entry holding a repair of data at
// offset, the value of that range as of index base.
func encodeRepair(offset int64, base uint64, data []byte) []byte {
	b := make([]byte, replication.ProposalHeaderSize+opHeaderSize+repairBase+len(data))
	h := b[replication.ProposalHeaderSize:]
	h[0] = opVersion
	h[1] = byte(opRepair)
	binary.LittleEndian.PutUint64(h[8:], uint64(offset))
	binary.LittleEndian.PutUint64(h[16:], uint64(len(data)))
	binary.LittleEndian.PutUint64(h[opHeaderSize:], base)
	copy(h[opHeaderSize+repairBase:], data)
	return b
}

// decodeOp parses an operation (the entry without its proposal ID) and
// checks it is self-consistent; the volume checks its range.
func decodeOp(b []byte) (op, error) {
	if len(b) < opHeaderSize {
		return op{}, fmt.Errorf("%w: operation of %d bytes", ErrCorrupt, len(b))
	}
	if b[0] != opVersion {
		return op{}, fmt.Errorf("%w: operation version %d", ErrCorrupt, b[0])
	}
	for _, c := range b[2:8] {
		if c != 0 {
			return op{}, fmt.Errorf("%w: operation reserved bytes set", ErrCorrupt)
		}
	}
	o := op{
		kind:   opKind(b[1]),
		offset: int64(binary.LittleEndian.Uint64(b[8:])),
		length: int64(binary.LittleEndian.Uint64(b[16:])),
		data:   b[opHeaderSize:],
	}
	if o.kind == opRepair {
		if len(o.data) < repairBase {
			return op{}, fmt.Errorf("%w: repair of %d bytes has no base index", ErrCorrupt, len(b))
		}
		o.base, o.data = binary.LittleEndian.Uint64(o.data), o.data[repairBase:]
	}
	if o.kind.named() {
		return o, checkNamed(o)
	}
	switch {
	case o.offset < 0 || o.length <= 0:
		return op{}, fmt.Errorf("%w: %v at %d of %d bytes", ErrCorrupt, o.kind, o.offset, o.length)
	case (o.kind == opWrite || o.kind == opRepair) && int64(len(o.data)) != o.length:
		return op{}, fmt.Errorf("%w: %v of %d bytes carries %d", ErrCorrupt, o.kind, o.length, len(o.data))
	case (o.kind == opTrim || o.kind == opWriteZeroes) && len(o.data) != 0:
		return op{}, fmt.Errorf("%w: %v carries data", ErrCorrupt, o.kind)
	case o.kind < opWrite || o.kind > opRepair:
		return op{}, fmt.Errorf("%w: operation kind %d", ErrCorrupt, b[1])
	}
	return o, nil
}
