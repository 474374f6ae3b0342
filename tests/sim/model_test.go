package sim

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// blockModel is what one block may hold when read: the value of the last
// acknowledged write (or trim) to it, plus the values of later writes whose
// outcome is unknown (they failed, or their node crashed, and may still have
// been committed). A write ID 0 is a zeroed block.
type blockModel struct {
	possible []uint64
	busy     bool   // a write or read of this block is in flight
	trims    uint64 // trims of this block issued so far (sweeps, membership_check_test.go)
}

func (b *blockModel) acknowledged(id uint64) { b.possible = append(b.possible[:0], id) }

func (b *blockModel) unknown(id uint64) {
	if !slices.Contains(b.possible, id) {
		b.possible = append(b.possible, id)
	}
}

// blockData fills a block for write id at block index blk: the ID, the
// block index, then a pattern drawn from both, so that a block written
// elsewhere or torn is seen.
func blockData(b []byte, id uint64, blk int64) {
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[8:], uint64(blk))
	for i := 16; i < len(b); i++ {
		b[i] = byte(id*131 + uint64(blk)*31 + uint64(i)*7)
	}
}

// decodeBlock returns the write ID a block holds (0: zeroes), or an error if
// it holds something no write wrote there.
func decodeBlock(b []byte, blk int64) (uint64, error) {
	id := binary.LittleEndian.Uint64(b)
	if id == 0 {
		for _, c := range b {
			if c != 0 {
				return 0, fmt.Errorf("block %d: non-zero bytes after a zero ID", blk)
			}
		}
		return 0, nil
	}
	want := make([]byte, len(b))
	blockData(want, id, blk)
	if string(want) != string(b) {
		return id, fmt.Errorf("block %d: content of write %d is damaged or misplaced (says block %d)",
			blk, id, binary.LittleEndian.Uint64(b[8:]))
	}
	return id, nil
}
