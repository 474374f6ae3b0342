package store

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// stagedTag is the tag of a block group g writes at lba, its gen-th.
func stagedTag(g uint64, lba int, gen uint64) uint64 { return g<<56 | uint64(lba)<<32 | gen }

// poison overwrites released bytes as a caller reusing them would.
func poison(b []byte) {
	for i := range b {
		b[i] = 0xDB
	}
}

// stagedHeld is a staged write whose bytes its caller keeps.
type stagedHeld struct {
	token uint64
	buf   []byte
}

// runStagedGroup is one group's apply loop for TestStagedConcurrentGroups:
// ops staged writes and trims at random places of v, tokens increasing or
// repeating, every write's bytes poisoned once the floor passes its token,
// no more than 64 writes held (as a full log would make the group wait).
// It returns what each block must hold.
func runStagedGroup(v *Volume, g uint64, blocks, ops int) ([]uint64, error) {
	rng := rand.New(rand.NewPCG(g, 99))
	want := make([]uint64, blocks)
	var held []stagedHeld
	token, gen := uint64(0), uint64(0)
	for range ops {
		if rng.IntN(4) != 0 {
			token++
		}
		lba := rng.IntN(blocks)
		if rng.IntN(10) == 0 {
			n := min(1+rng.IntN(70), blocks-lba)
			if err := v.TrimStaged(int64(lba)*BlockSize, int64(n)*BlockSize, token); err != nil {
				return nil, err
			}
			clear(want[lba : lba+n])
		} else {
			n := min(1+rng.IntN(20), blocks-lba)
			buf := make([]byte, n*BlockSize)
			for j := range n {
				gen++
				want[lba+j] = stagedTag(g, lba+j, gen)
				makeBlock(buf[j*BlockSize:], want[lba+j])
			}
			if err := v.WriteStaged(buf, int64(lba)*BlockSize, token); err != nil {
				return nil, err
			}
			held = append(held, stagedHeld{token: token, buf: buf})
		}
		var err error
		if held, err = releaseHeld(v, held, 64); err != nil {
			return nil, err
		}
	}
	return want, nil
}

// releaseHeld poisons and drops the held writes below v's floor, waiting
// while more than limit are held.
func releaseHeld(v *Volume, held []stagedHeld, limit int) ([]stagedHeld, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		floor, ok := v.StagedFloor()
		for len(held) > 0 && (!ok || held[0].token < floor) {
			poison(held[0].buf)
			held = held[1:]
		}
		if len(held) <= limit {
			return held, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%v: the floor stays at %d, %v with %d writes held", v.ID(), floor, ok, len(held))
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// readStagedGroups reads random ranges of the groups' volumes until stop
// and checks that every block is zeros or a block its group wrote there.
func readStagedGroups(vols []*Volume, blocks int, seed uint64, stop *atomic.Bool) error {
	rng := rand.New(rand.NewPCG(seed, 77))
	buf := make([]byte, 8*BlockSize)
	for !stop.Load() {
		g := rng.IntN(len(vols))
		lba := rng.IntN(blocks)
		n := min(1+rng.IntN(8), blocks-lba)
		if err := vols[g].ReadAt(ctx, buf[:n*BlockSize], int64(lba)*BlockSize); err != nil {
			return fmt.Errorf("read of group %d blocks %d..%d: %w", g, lba, lba+n-1, err)
		}
		for j := range n {
			tag, ok := blockTag(buf[j*BlockSize:])
			if !ok {
				return fmt.Errorf("group %d block %d holds data no write made (poison: %v)", g, lba+j,
					buf[j*BlockSize] == 0xDB)
			}
			if tag != 0 && tag>>32 != stagedTag(uint64(g), lba+j, 0)>>32 {
				return fmt.Errorf("group %d block %d holds tag %x, written for another block", g, lba+j, tag)
			}
		}
	}
	return nil
}
