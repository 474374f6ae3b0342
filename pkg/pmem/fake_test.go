package pmem

import (
	"bytes"
	"errors"
	"testing"
)

var errPowerLost = errors.New("test: power lost")

func TestFakeCrashKeepsEveryPersistedByte(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		f := NewFake(4096, seed)
		fill(f.Bytes()[:2048], 0xAA)
		if err := f.Persist(0, 1000); err != nil {
			t.Fatal(err)
		}
		if err := f.Persist(1500, 13); err != nil {
			t.Fatal(err)
		}
		image := f.Crash()
		for _, r := range [][2]int{{0, 1000}, {1500, 1513}} {
			if !bytes.Equal(image[r[0]:r[1]], f.Bytes()[r[0]:r[1]]) {
				t.Fatalf("seed %d: persisted range %v not kept", seed, r)
			}
		}
		// Bytes never stored stay zero whatever the draw.
		if !bytes.Equal(image[2048:], make([]byte, 2048)) {
			t.Fatalf("seed %d: bytes that were never stored changed", seed)
		}
	}
}

// TestFakeCrashDropsSomeUnpersistedStores checks that unpersisted stores are
// neither always lost nor always kept, and that what is kept comes in whole,
// aligned 8-byte words taken from the stores.
func TestFakeCrashDropsSomeUnpersistedStores(t *testing.T) {
	var sawAllKept, sawSomeDropped, sawSomeKept bool
	for seed := int64(0); seed < 50; seed++ {
		f := NewFake(4096, seed)
		fill(f.Bytes(), 0x55)
		image := f.Crash()
		kept := 0
		for word := 0; word < len(image); word += 8 {
			switch {
			case bytes.Equal(image[word:word+8], f.Bytes()[word:word+8]):
				kept++
			case !bytes.Equal(image[word:word+8], make([]byte, 8)):
				t.Fatalf("seed %d: word at %d is torn: %x", seed, word, image[word:word+8])
			}
		}
		sawAllKept = sawAllKept || kept == len(image)/8
		sawSomeDropped = sawSomeDropped || kept < len(image)/8
		sawSomeKept = sawSomeKept || kept > 0
	}
	if sawAllKept || !sawSomeDropped || !sawSomeKept {
		t.Fatalf("over 50 seeds: all kept %v, some dropped %v, some kept %v", sawAllKept, sawSomeDropped, sawSomeKept)
	}
}

func TestFakeCrashIsReproducibleFromTheSeed(t *testing.T) {
	images := make([][]byte, 2)
	for i := range images {
		f := NewFake(8192, 42)
		fill(f.Bytes(), 0x77)
		images[i] = f.Crash()
	}
	if !bytes.Equal(images[0], images[1]) {
		t.Fatal("two Fakes with the same seed and history crashed differently")
	}
	other := NewFake(8192, 43)
	fill(other.Bytes(), 0x77)
	if bytes.Equal(images[0], other.Crash()) {
		t.Fatal("seeds 42 and 43 crashed identically")
	}
}

func TestFakeFailAfterStopsPersisting(t *testing.T) {
	f := NewFake(256, 1)
	f.FailAfter(2, errPowerLost)
	for i := range 4 {
		f.Bytes()[i*64] = byte(i + 1)
		err := f.Persist(i*64, 1)
		if wantErr := i >= 2; (err != nil) != wantErr || (err != nil && !errors.Is(err, errPowerLost)) {
			t.Fatalf("Persist call %d = %v, want failure %v", i+1, err, wantErr)
		}
	}
	if got := f.PersistCalls(); got != 4 {
		t.Errorf("PersistCalls() = %d, want 4", got)
	}
	persisted := f.Persisted()
	if persisted[0] != 1 || persisted[64] != 2 || persisted[128] != 0 || persisted[192] != 0 {
		t.Errorf("persisted first bytes of lines = %d %d %d %d, want 1 2 0 0",
			persisted[0], persisted[64], persisted[128], persisted[192])
	}
	f.FailAfter(-1, errPowerLost)
	if err := f.Persist(128, 1); err != nil {
		t.Errorf("Persist after FailAfter(-1) = %v", err)
	}
}

func TestFakeCrashRegionIsFullyPersisted(t *testing.T) {
	f := NewFake(1024, 9)
	fill(f.Bytes(), 0x11)
	if err := f.Persist(0, 512); err != nil {
		t.Fatal(err)
	}
	c := f.CrashRegion()
	if c.Size() != f.Size() || c.Mode() != ModeFake {
		t.Fatalf("crash region: size %d mode %v", c.Size(), c.Mode())
	}
	if !bytes.Equal(c.Crash(), c.Bytes()) {
		t.Fatal("crashing a fresh crash region changed it")
	}
	if !bytes.Equal(c.Bytes()[:512], f.Bytes()[:512]) {
		t.Fatal("crash region lost persisted bytes")
	}
}

func TestFakePersistChecksRangeAndClose(t *testing.T) {
	f := NewFake(100, 0)
	if err := f.Persist(90, 11); !errors.Is(err, ErrRange) {
		t.Errorf("Persist past the end = %v, want ErrRange", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Persist(0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Persist after Close = %v, want ErrClosed", err)
	}
	image := NewFakeImage([]byte{1, 2, 3}, 0)
	if !bytes.Equal(image.Crash(), []byte{1, 2, 3}) {
		t.Error("NewFakeImage did not persist its image")
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}
