package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"basalt/pkg/compress"
	"basalt/pkg/disk"
)

// corpusBlock fills dst with the block written with tag: generated text
// (compressible) for an odd tag, makeBlock's random bytes for an even one;
// the tag leads either.
func corpusBlock(dst []byte, tag uint64) {
	if tag == 0 || tag%2 == 0 {
		makeBlock(dst, tag)
		return
	}
	r := rand.New(rand.NewPCG(tag, 7))
	words := []string{"stripe", "segment", "summary", "the", "drive", "parity", "block", "map",
		"of", "and", "cleaner", "writes", "reads", "recovery", "a", "volume", "checkpoint"}
	var b bytes.Buffer
	for b.Len() < BlockSize {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	copy(dst, b.Bytes()[:BlockSize])
	binary.LittleEndian.PutUint64(dst, tag)
}

func writeCorpus(t testing.TB, v *Volume, lba, tag uint64) {
	t.Helper()
	buf := make([]byte, BlockSize)
	corpusBlock(buf, tag)
	if err := v.WriteAt(ctx, buf, int64(lba)*BlockSize, 0); err != nil {
		t.Fatalf("WriteAt(lba %d): %v", lba, err)
	}
}

// checkCorpus reads every block of v, one by one and then in runs of 64
// (the runs packed slots serve several blocks of), and compares them with
// want's tags.
func checkCorpus(t testing.TB, v *Volume, want []uint64) {
	t.Helper()
	exp := make([]byte, BlockSize)
	for _, run := range []int{1, 64} {
		got := make([]byte, run*BlockSize)
		for lba := 0; lba < len(want); lba += run {
			n := min(run, len(want)-lba)
			if err := v.ReadAt(ctx, got[:n*BlockSize], int64(lba)*BlockSize); err != nil {
				t.Fatalf("ReadAt(lba %d, %d blocks): %v", lba, n, err)
			}
			for i := range n {
				corpusBlock(exp, want[lba+i])
				if b := got[i*BlockSize : (i+1)*BlockSize]; !bytes.Equal(b, exp) {
					t.Fatalf("lba %d: read tag %d, want %d", lba+i, binary.LittleEndian.Uint64(b), want[lba+i])
				}
			}
		}
	}
}

// packedEntries counts v's map entries that point into packed slots.
func packedEntries(v *Volume) int {
	n := 0
	v.v.lmap.forEach(func(_ uint64, e entry) {
		if e.packed() {
			n++
		}
	})
	return n
}

// TestCompressedVolume writes a corpus of half text, half random blocks to
// a compressed volume, reads it back before and after a restart, then
// overwrites half of it over and over until the cleaner has moved packed
// slots, and checks everything again, the live counts and a restart.
func TestCompressedVolume(t *testing.T) {
	for _, alg := range []compress.Algorithm{compress.LZ4, compress.Zstd} {
		t.Run(alg.String(), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0))
			cfg := defaultRigConfig()
			cfg.opts.synchronous = true
			r := newRig(t, cfg)
			n := int(r.s.Stats().CapacityBytes/BlockSize) * 6 / 10
			v, err := r.s.CreateVolumeWith("c", int64(n)*BlockSize, VolumeOptions{Compression: alg})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, n)
			tag := uint64(0)
			write := func(lba int) {
				tag++
				writeCorpus(t, v, uint64(lba), tag)
				want[lba] = tag
				if tag%8 == 0 {
					r.s.w.work()
				}
			}
			for lba := range n {
				write(lba)
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			checkCorpus(t, v, want)
			if p := packedEntries(v); p < n/3 {
				t.Fatalf("%d of %d blocks packed, want the text half", p, n)
			}
			logical, stored := v.CompressionStats()
			t.Logf("%v: %d blocks, half text: %d logical bytes stored in %d (ratio %.2f)", alg, n, logical, stored,
				float64(logical)/float64(stored))
			if st := r.s.Stats(); stored >= logical || st.CompressionStoredBytes != stored {
				t.Fatalf("stored %d of %d logical bytes; store counts %d", stored, logical, st.CompressionStoredBytes)
			}
			if err := r.s.ResizeVolume("c", int64(n+16)*BlockSize); err != nil { // rewrites its record
				t.Fatal(err)
			}
			want = append(want, make([]uint64, 16)...)
			r.reopen()
			v, _ = r.s.Volume("c")
			if v.Compression() != alg {
				t.Fatalf("after a resize and a restart the volume compresses with %v", v.Compression())
			}
			checkCorpus(t, v, want)
			gcBefore := r.s.Stats().GCRuns
			for i := 0; i < 2*n || (r.s.Stats().GCRuns == gcBefore && i < 40*n); i++ {
				write(rng.IntN(n / 2))
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if st := r.s.Stats(); st.GCRuns == gcBefore || st.RelocatedBlocks == 0 {
				t.Fatalf("no cleaning: %d GC runs, %d relocated", st.GCRuns-gcBefore, st.RelocatedBlocks)
			}
			checkCorpus(t, v, want)
			r.reopen()
			v, _ = r.s.Volume("c")
			checkCorpus(t, v, want)
			checkLiveCounts(t, r.s)
		})
	}
}

// TestCrashRecoveryCompressed is the crash property test (crash_test.go)
// on compressed volumes: a third of the blocks written compress and are
// packed, several to a slot; every acknowledged write reads back after
// every crash. One seed in four runs the writer goroutine concurrently.
func TestCrashRecoveryCompressed(t *testing.T) {
	n := 16
	if testing.Short() || raceEnabled {
		n = 4
	}
	for _, seed := range testSeeds(t, n) {
		alg := []compress.Algorithm{compress.LZ4, compress.Zstd}[seed%2]
		sync := seed%4 != 0 // one in four with the writer goroutine running (not replayable exactly)
		t.Run(fmt.Sprintf("seed=%d/%v/sync=%v", seed, alg, sync), func(t *testing.T) {
			if err := runCrashSeedWith(t, seed, sync, VolumeOptions{Compression: alg}); err != nil {
				t.Fatalf("seed %d: %v\nreplay: go test ./pkg/store -run 'TestCrashRecoveryCompressed$' -seed=%d",
					seed, err, seed)
			}
		})
	}
}

func TestSummaryRoundTripPacked(t *testing.T) {
	s := sampleSummary()
	s.entries = []summaryEntry{
		{kind: kindWrite, vol: 1, lba: 10, sum: 7, frag: 1},
		{kind: kindWrite, vol: 1, lba: 11, sum: 9},
		{kind: kindWrite, vol: 1, lba: 12, sum: 7, frag: 2},
		{kind: kindRelocate, vol: 2, lba: 3, sum: 8, from: 5 | packedBit, frag: 1},
	}
	var got summary
	if err := decodeSummary(encodedSummary(s), 4, &got); err != nil {
		t.Fatal(err)
	}
	var c slotCursor
	var slots []int
	for i, e := range got.entries {
		if e != s.entries[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, e, s.entries[i])
		}
		q, _ := c.next(e)
		slots = append(slots, q)
	}
	if fmt.Sprint(slots) != "[0 1 0 2]" || c.used != 3 {
		t.Fatalf("slots %v (%d used), want [0 1 0 2] (3)", slots, c.used)
	}
	if sums := dataSums(&got); fmt.Sprint(sums) != "[7 9 8]" {
		t.Fatalf("slot sums %v, want [7 9 8]", sums)
	}
}

// TestCompressedVolumeSurvivesFaults: packed slots are repaired from parity
// like any slot (a corrupted one reads back right and is rewritten), scrub
// finds a compressed volume's stripes intact, and a rebuild onto a
// replacement drive restores them.
func TestCompressedVolumeSurvivesFaults(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.faults = true
	r := newRig(t, cfg)
	v, err := r.s.CreateVolumeWith("a", 4<<20, VolumeOptions{Compression: compress.Zstd})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]uint64, 200)
	for lba := range want {
		want[lba] = uint64(lba + 1) // odd: text, even: random
		writeCorpus(t, v, uint64(lba), want[lba])
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	lba := 0
	for ; lba < len(want) && !v.v.lmap.get(uint64(lba)).packed(); lba++ {
	}
	if lba == len(want) {
		t.Fatal("no block was packed")
	}
	at := blockLocation(t, r, v, uint64(lba))
	corrupt(t, r, at.drive, at.offset)
	checkCorpus(t, v, want)
	if st := r.s.Stats(); st.Repairs != 1 || st.DegradedReads != 1 {
		t.Fatalf("repairs %d, degraded reads %d; want 1 and 1", st.Repairs, st.DegradedReads)
	}
	if res, err := r.s.Scrub(ctx, nil); err != nil || res.Bad != 0 {
		t.Fatalf("scrub after the repair: %+v, %v", res, err)
	}
	r.fault[2].Fail()
	checkCorpus(t, v, want) // degraded: packed slots reconstructed
	if err := r.s.ReplaceDrive(2, disk.NewMem(4<<20)); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Rebuild(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r.fault[0].Fail()
	checkCorpus(t, v, want)
	if res, err := r.s.Scrub(ctx, nil); err != nil || res.Bad != 0 {
		t.Fatalf("scrub after rebuild and a second loss: %+v, %v", res, err)
	}
}
