package cache_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// sixRecords formats a Fake and appends records 1..6.
func sixRecords(t *testing.T, seed int64) (*cache.Buffer, *pmem.Fake, []record) {
	b, f := openFake(t, 4096, seed)
	var live []record
	for i := range 6 {
		p := payloadFor(cache.Seq(i+1), 150)
		live = append(live, record{mustAppend(t, b, 1, p), 1, p})
	}
	return b, f, live
}

// TestTornHeaderWriteKeepsThePreviousHeader loses power during the header
// write of a Release, with random fragments of the new header reaching the
// media. Recovery must use one of the two headers whole: records 1..6 (the
// Release did not happen) or 4..6 (it did), never fail or lose more.
func TestTornHeaderWriteKeepsThePreviousHeader(t *testing.T) {
	outcomes := map[int]int{}
	for seed := range int64(40) {
		b, f, live := sixRecords(t, seed)
		f.FailAfter(f.PersistCalls(), errPowerLost)
		if err := b.Release(3); !errors.Is(err, cache.ErrFailed) || !errors.Is(err, errPowerLost) {
			t.Fatalf("Release with a failing Persist = %v", err)
		}
		if st := b.Stats(); st.First != 1 {
			t.Fatalf("a failed Release moved First to %v", st.First)
		}
		b, _ = crashAndOpen(t, f)
		got := replayAll(t, b)
		if diffRecords(got, live) != "" && diffRecords(got, live[3:]) != "" {
			t.Fatalf("seed %d: recovered %v", seed, got)
		}
		outcomes[len(got)]++
	}
	t.Logf("outcomes (records recovered: seeds): %v", outcomes)
}

// newestSlot returns the region offset of the header slot with the higher
// generation (slot layout in doc.go).
func newestSlot(image []byte) int {
	if binary.LittleEndian.Uint64(image[128+40:]) > binary.LittleEndian.Uint64(image[40:]) {
		return 128
	}
	return 0
}

func TestDamagedHeaderSlots(t *testing.T) {
	tests := []struct {
		name         string
		damageNewest bool
		damageOldest bool
		wantFirst    int // index in live of the first record recovered; -1: ErrCorrupt
	}{
		{"newest slot damaged: the previous header is used", true, false, 0},
		{"older slot damaged: the newest header is used", false, true, 3},
		{"both damaged: refused", true, true, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f, live := sixRecords(t, 1)
			if err := b.Release(3); err != nil {
				t.Fatal(err)
			}
			image := f.Persisted()
			newest := newestSlot(image)
			if tt.damageNewest {
				image[newest+60] ^= 0x40
			}
			if tt.damageOldest {
				image[128-newest+100] ^= 0x01
			}
			b, err := cache.Open(pmem.NewFakeImage(image, 1), cache.Options{})
			if tt.wantFirst < 0 {
				if !errors.Is(err, cache.ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, b, live[tt.wantFirst:])
		})
	}
}
