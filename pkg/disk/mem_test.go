package disk

import (
	"bytes"
	"testing"
)

// sectorsFrom reports whether every 512-byte sector of got equals the same
// sector of one of the candidates.
func sectorsFrom(got []byte, candidates ...[]byte) bool {
	for s := 0; s < len(got); s += SectorSize {
		found := false
		for _, c := range candidates {
			if bytes.Equal(got[s:s+SectorSize], c[s:s+SectorSize]) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestNewMemRejectsBadSizes(t *testing.T) {
	for _, size := range []int64{0, -BlockSize, BlockSize + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewMem(%d) did not panic", size)
				}
			}()
			NewMem(size)
		}()
	}
}

func TestMemCrashCloneKeepsSyncedDataAlways(t *testing.T) {
	d := NewMem(32 * BlockSize)
	synced := pattern(32*BlockSize, 1)
	mustWrite(t, d, synced, 0)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if d.UnsyncedBlocks() != 0 {
		t.Fatalf("UnsyncedBlocks() = %d after Sync", d.UnsyncedBlocks())
	}
	for _, pct := range []int{0, 50, 100} {
		for seed := range int64(5) {
			clone := d.CrashClone(seed, pct)
			if got := mustRead(t, clone, len(synced), 0); !bytes.Equal(got, synced) {
				t.Fatalf("pct %d seed %d: synced data lost", pct, seed)
			}
		}
	}
}

func TestMemCrashCloneWithZeroKeepsOnlyDurableImage(t *testing.T) {
	d := NewMem(16 * BlockSize)
	old := pattern(16*BlockSize, 1)
	mustWrite(t, d, old, 0)
	d.Sync()
	mustWrite(t, d, pattern(8*BlockSize, 2), 0)
	if err := d.Discard(8*BlockSize, 8*BlockSize); err != nil {
		t.Fatal(err)
	}
	if d.UnsyncedBlocks() != 16 {
		t.Fatalf("UnsyncedBlocks() = %d, want 16", d.UnsyncedBlocks())
	}
	clone := d.CrashClone(42, 0)
	if got := mustRead(t, clone, len(old), 0); !bytes.Equal(got, old) {
		t.Fatal("unsynced writes or discards survived with keep 0%")
	}
	if clone.UnsyncedBlocks() != 0 {
		t.Fatal("clone is not fully synced")
	}
}

// With every unsynced write kept, each block holds the new data or, where
// torn, a sector-by-sector mix of old and new; some blocks are torn.
func TestMemCrashCloneTearsAtSectorGranularity(t *testing.T) {
	const blocks = 256
	d := NewMem(blocks * BlockSize)
	old := pattern(blocks*BlockSize, 1)
	mustWrite(t, d, old, 0)
	d.Sync()
	fresh := pattern(blocks*BlockSize, 2)
	mustWrite(t, d, fresh, 0)
	clone := d.CrashClone(7, 100)
	got := mustRead(t, clone, blocks*BlockSize, 0)
	whole, torn := 0, 0
	for b := 0; b < blocks; b++ {
		span := got[b*BlockSize : (b+1)*BlockSize]
		newSpan := fresh[b*BlockSize : (b+1)*BlockSize]
		switch {
		case bytes.Equal(span, newSpan):
			whole++
		case sectorsFrom(span, old[b*BlockSize:(b+1)*BlockSize], newSpan):
			torn++
		default:
			t.Fatalf("block %d holds data that is neither old nor new per sector", b)
		}
	}
	if torn == 0 || whole == 0 {
		t.Fatalf("whole %d, torn %d: expected both", whole, torn)
	}
}

func TestMemCrashCloneIsDeterministicAndPartial(t *testing.T) {
	const blocks = 128
	d := NewMem(blocks * BlockSize)
	mustWrite(t, d, pattern(blocks*BlockSize, 3), 0)
	// Two unsynced versions of the first block: any sector of the result
	// must come from zero, the first or the second version.
	first, second := pattern(BlockSize, 4), pattern(BlockSize, 5)
	mustWrite(t, d, first, 0)
	mustWrite(t, d, second, 0)
	a := mustRead(t, d.CrashClone(99, 50), blocks*BlockSize, 0)
	b := mustRead(t, d.CrashClone(99, 50), blocks*BlockSize, 0)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed produced different crash images")
	}
	c := mustRead(t, d.CrashClone(100, 50), blocks*BlockSize, 0)
	if bytes.Equal(a, c) {
		t.Fatal("different seeds produced identical crash images")
	}
	if !sectorsFrom(a[:BlockSize], make([]byte, BlockSize), first, second) {
		t.Fatal("block 0 holds data never written to it")
	}
	zeroBlocks := 0
	for i := 1; i < blocks; i++ {
		if bytes.Equal(a[i*BlockSize:(i+1)*BlockSize], make([]byte, BlockSize)) {
			zeroBlocks++
		}
	}
	if zeroBlocks == 0 || zeroBlocks == blocks-1 {
		t.Fatalf("keep 50%%: %d of %d blocks lost; expected some, not all", zeroBlocks, blocks-1)
	}
}
