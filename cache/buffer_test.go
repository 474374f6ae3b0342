package cache_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

func TestAppendReadRoundTrip(t *testing.T) {
	b, f := openFake(t, 64<<10, 1)
	max := b.Stats().MaxPayload
	tests := []struct {
		name     string
		kind     cache.Kind
		payloads [][]byte
	}{
		{"empty", 0, nil},
		{"one byte", 1, [][]byte{{42}}},
		{"header and data", 2, [][]byte{[]byte("hdr:"), bytes.Repeat([]byte{7}, 4096)}},
		{"three pieces, one empty", 3, [][]byte{[]byte("a"), nil, []byte("bc")}},
		{"exactly 64-byte record", 4, [][]byte{make([]byte, 24)}},
		{"a third of the log", 255, [][]byte{payloadFor(9, max*2/3)}},
	}
	var want []record
	for _, tt := range tests {
		seq := mustAppend(t, b, tt.kind, bytes.Join(tt.payloads, nil))
		split, err := b.Append(context.Background(), tt.kind, tt.payloads...)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if split != seq+1 {
			t.Fatalf("%s: seqs %v then %v, want consecutive", tt.name, seq, split)
		}
		joined := bytes.Join(tt.payloads, nil)
		want = append(want, record{seq, tt.kind, joined}, record{split, tt.kind, joined})
	}
	checkRecords(t, b, want)
	b = reopen(t, b, f)
	checkRecords(t, b, want)
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, want)
}

func TestSeqsStartAtOneAndStats(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	st := b.Stats()
	if st.First != 1 || st.Last != 0 || st.Live != 0 || st.Used != 0 || st.Size != 4096 ||
		st.MaxPayload != 2048-40 || st.UUID != testUUID || st.Mode != pmem.ModeFake.String() {
		t.Fatalf("fresh Stats = %+v", st)
	}
	for i := range 3 {
		if seq := mustAppend(t, b, 0, make([]byte, 100)); seq != cache.Seq(i+1) {
			t.Fatalf("append %d got seq %v", i, seq)
		}
	}
	st = b.Stats()
	if st.Live != 3 || st.First != 1 || st.Last != 3 || st.Used != 3*192 || st.Appends != 3 || st.AppendSize != 300 {
		t.Fatalf("Stats after 3 appends = %+v", st)
	}
	if got := cache.Seq(12).String(); got != "12" {
		t.Errorf("Seq.String() = %q", got)
	}
	if got := cache.Kind(3).String(); got != "3" {
		t.Errorf("Kind.String() = %q", got)
	}
}

func TestReadReusesDestination(t *testing.T) {
	b, _ := openFake(t, 64<<10, 1)
	seq := mustAppend(t, b, 5, payloadFor(1, 4096))
	dst := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		_, p, err := b.Read(seq, dst)
		if err != nil || &p[0] != &dst[:1][0] {
			t.Fatal("Read did not use dst")
		}
	})
	if allocs != 0 {
		t.Errorf("Read allocated %v times per call", allocs)
	}
}

func TestAppendRejectsOversizedRecords(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	max := b.Stats().MaxPayload
	if _, err := b.Append(context.Background(), 0, make([]byte, max+1)); !errors.Is(err, cache.ErrTooLarge) {
		t.Fatalf("Append of %d bytes = %v, want ErrTooLarge", max+1, err)
	}
	if _, err := b.Append(context.Background(), 0, make([]byte, max/2), make([]byte, max/2+2)); !errors.Is(err, cache.ErrTooLarge) {
		t.Fatalf("Append of pieces summing to %d bytes = %v, want ErrTooLarge", max+1, err)
	}
	mustAppend(t, b, 0, make([]byte, max))
}

func TestReadAndReleaseErrors(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	for range 4 {
		mustAppend(t, b, 1, []byte("x"))
	}
	if err := b.Release(2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		seq  cache.Seq
		want error
	}{{0, cache.ErrNotFound}, {1, cache.ErrReleased}, {2, cache.ErrReleased}, {3, nil}, {4, nil}, {5, cache.ErrNotFound}}
	for _, tt := range tests {
		if _, _, err := b.Read(tt.seq, nil); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("Read(%v) = %v, want %v", tt.seq, err, tt.want)
		}
	}
	if err := b.Release(1); err != nil {
		t.Errorf("Release of released records = %v, want nil", err)
	}
	if err := b.Release(5); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("Release past the last record = %v, want ErrNotFound", err)
	}
	if st := b.Stats(); st.First != 3 || st.Live != 2 {
		t.Errorf("after failed Release: First %v Live %d, want 3 and 2", st.First, st.Live)
	}
}

// TestWrapAroundKeepsRecordsAcrossLaps drives a 2 KiB log through many laps
// with record sizes that force padding. Records stay live until an Append
// blocks for space; then the test releases all but the newest few. It checks
// the live records after every step, after a clean reopen every few steps, and
// after a crash at the end.
func TestWrapAroundKeepsRecordsAcrossLaps(t *testing.T) {
	b, f := openFake(t, 2048, 1)
	var live []record
	sizes := []int{0, 100, 984, 300, 24, 500, 700, 64, 200, 900, 10, 10, 10}
	blocked := 0
	for i := range 300 {
		n := sizes[i%len(sizes)]
		p := payloadFor(cache.Seq(i+1), n)
		seq, released := appendReleasing(t, b, cache.Kind(i), p, live)
		if released > 0 {
			blocked++
			live = live[released:]
		}
		live = append(live, record{seq, cache.Kind(i), p})
		if st := b.Stats(); st.Used > st.Size {
			t.Fatalf("Used %d > Size %d", st.Used, st.Size)
		}
		checkRecords(t, b, live)
		if i%17 == 0 {
			b = reopen(t, b, f)
			checkRecords(t, b, live)
		}
	}
	if blocked < 20 {
		t.Fatalf("Append blocked only %d times; the test meant to fill the log often", blocked)
	}
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, live)
}

// appendReleasing appends p; whenever the Append waits for space, it releases
// live records one at a time from the oldest, and reports how many it released.
func appendReleasing(t *testing.T, b *cache.Buffer, kind cache.Kind, p []byte, live []record) (cache.Seq, int) {
	t.Helper()
	type result struct {
		seq cache.Seq
		err error
	}
	done := make(chan result, 1)
	waits := b.Stats().SpaceWaits
	go func() {
		seq, err := b.Append(context.Background(), kind, p)
		done <- result{seq, err}
	}()
	released := 0
	for {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.seq, released
		default:
		}
		if b.Stats().SpaceWaits > waits && released < len(live) {
			if err := b.Release(live[released].Seq); err != nil {
				t.Fatal(err)
			}
			released++
			for range 100 { // let the waiter run before releasing more
				runtime.Gosched()
			}
			continue
		}
		runtime.Gosched()
	}
}

func TestTruncateDropsTheSuffix(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	var live []record
	for i := range 5 {
		p := payloadFor(cache.Seq(i+1), 100)
		live = append(live, record{mustAppend(t, b, 1, p), 1, p})
	}
	if err := b.Truncate(3); err != nil {
		t.Fatal(err)
	}
	live = live[:2]
	checkRecords(t, b, live)
	if _, _, err := b.Read(3, nil); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("Read of a truncated record = %v, want ErrNotFound", err)
	}
	p := []byte("replacement")
	if seq := mustAppend(t, b, 2, p); seq != 3 {
		t.Fatalf("Append after Truncate(3) got seq %v", seq)
	}
	live = append(live, record{3, 2, p})
	if err := b.Truncate(10); err != nil {
		t.Fatalf("Truncate past the end: %v", err)
	}
	checkRecords(t, b, live)
	b = reopen(t, b, f)
	checkRecords(t, b, live)

	// Below the first live record, Truncate drops everything and the next
	// Append continues after the released records.
	if err := b.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := b.Truncate(0); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, nil)
	if seq := mustAppend(t, b, 0, nil); seq != 2 {
		t.Fatalf("Append after dropping everything got seq %v, want 2", seq)
	}
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, []record{{2, 0, []byte{}}})
}

// TestTruncatedRecordsNeverComeBack covers the case the epochs exist for: new
// records of the same size land exactly where truncated ones began, so a
// truncated record sits at the position and seq the scan expects next.
func TestTruncatedRecordsNeverComeBack(t *testing.T) {
	for _, appendAfter := range []int{0, 1, 2} {
		b, f := openFake(t, 4096, int64(appendAfter))
		var live []record
		for i := range 6 {
			p := payloadFor(cache.Seq(i+1), 200)
			live = append(live, record{mustAppend(t, b, 1, p), 1, p})
		}
		if err := b.Truncate(3); err != nil {
			t.Fatal(err)
		}
		live = live[:2]
		for i := range appendAfter {
			p := payloadFor(cache.Seq(100+i), 200)
			live = append(live, record{mustAppend(t, b, 9, p), 9, p})
		}
		b, crashed := crashAndOpen(t, f)
		checkRecords(t, b, live)
		// And again after a second crash, with the recovered epoch.
		p := payloadFor(77, 200)
		live = append(live, record{mustAppend(t, b, 7, p), 7, p})
		b, _ = crashAndOpen(t, crashed)
		checkRecords(t, b, live)
	}
}

// TestRecordsPastATornOneStayDead: record 3 is torn, 4 and 5 persisted (as
// when concurrent appends persist out of order). Recovery keeps 1 and 2; a new
// record 3 of the old size then lands where the old one was, and old 4 and 5
// must still not come back.
func TestRecordsPastATornOneStayDead(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	for i := range 5 {
		mustAppend(t, b, 1, payloadFor(cache.Seq(i+1), 100))
	}
	image := f.Persisted()
	image[headerBlock+2*192+50] ^= 0xff // inside record 3's payload
	torn := pmem.NewFakeImage(image, 1)
	b, err := cache.Open(torn, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := []record{{1, 1, payloadFor(1, 100)}, {2, 1, payloadFor(2, 100)}}
	checkRecords(t, b, live)
	live = append(live, record{mustAppend(t, b, 1, payloadFor(3, 100)), 1, payloadFor(3, 100)})
	b, _ = crashAndOpen(t, torn)
	checkRecords(t, b, live)
}

func TestCleanCloseMarkCatchesLostRecords(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	for i := range 5 {
		mustAppend(t, b, 1, payloadFor(cache.Seq(i+1), 100))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	image := f.Persisted()
	image[headerBlock+3*192+45] ^= 1 // record 4
	if _, err := cache.Open(pmem.NewFakeImage(image, 1), cache.Options{}); !errors.Is(err, cache.ErrCorrupt) {
		t.Fatalf("Open of a cleanly closed log missing records = %v, want ErrCorrupt", err)
	}
	// Without a clean close the same damage is a crash: keep the prefix.
	b, f = openFake(t, 4096, 1)
	for i := range 5 {
		mustAppend(t, b, 1, payloadFor(cache.Seq(i+1), 100))
	}
	image = f.Persisted()
	image[headerBlock+3*192+45] ^= 1
	b, err := cache.Open(pmem.NewFakeImage(image, 1), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, []record{{1, 1, payloadFor(1, 100)}, {2, 1, payloadFor(2, 100)}, {3, 1, payloadFor(3, 100)}})
}

func TestOpenRefusesWhatItCannotInterpret(t *testing.T) {
	if _, err := cache.Open(pmem.NewFake(headerBlock+1023, 1), cache.Options{}); !errors.Is(err, cache.ErrRegionTooSmall) {
		t.Errorf("Open of a tiny region = %v, want ErrRegionTooSmall", err)
	}
	garbage := pmem.NewFake(headerBlock+4096, 1)
	copy(garbage.Bytes()[300:], "not a write buffer")
	if _, err := cache.Open(garbage, cache.Options{}); !errors.Is(err, cache.ErrCorrupt) {
		t.Errorf("Open of a non-blank unformatted region = %v, want ErrCorrupt", err)
	}
	b, err := cache.Open(garbage, cache.Options{Reformat: true})
	if err != nil {
		t.Fatalf("Open with Reformat: %v", err)
	}
	if b.Stats().UUID == ([16]byte{}) {
		t.Error("Reformat left a zero UUID")
	}
	mustAppend(t, b, 0, []byte("x"))
	b.Close()

	bigger := pmem.NewFake(headerBlock+8192, 1)
	copy(bigger.Bytes(), garbage.Bytes())
	if _, err := cache.Open(bigger, cache.Options{}); !errors.Is(err, cache.ErrCorrupt) {
		t.Errorf("Open of a region that changed size = %v, want ErrCorrupt", err)
	}
	b, err = cache.Open(garbage, cache.Options{Reformat: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, nil)
}

func TestClosedBufferRefusesEverything(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	mustAppend(t, b, 0, []byte("x"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(context.Background(), 0, nil); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("Append = %v", err)
	}
	if _, _, err := b.Read(1, nil); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("Read = %v", err)
	}
	for name, err := range map[string]error{
		"Release": b.Release(1), "Truncate": b.Truncate(1), "Close": b.Close(),
		"Replay": b.Replay(func(cache.Seq, cache.Kind, []byte) error { return nil }),
	} {
		if !errors.Is(err, cache.ErrClosed) {
			t.Errorf("%s = %v, want ErrClosed", name, err)
		}
	}
}

func TestFailedPersistFailsTheBuffer(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	mustAppend(t, b, 0, []byte("kept"))
	f.FailAfter(f.PersistCalls(), errPowerLost)
	_, err := b.Append(context.Background(), 0, []byte("lost"))
	if !errors.Is(err, cache.ErrFailed) || !errors.Is(err, errPowerLost) {
		t.Fatalf("Append with a failing Persist = %v, want ErrFailed wrapping the cause", err)
	}
	f.FailAfter(-1, errPowerLost)
	if _, err := b.Append(context.Background(), 0, nil); !errors.Is(err, cache.ErrFailed) {
		t.Errorf("Append after a failure = %v, want ErrFailed", err)
	}
	if err := b.Release(1); !errors.Is(err, cache.ErrFailed) {
		t.Errorf("Release after a failure = %v, want ErrFailed", err)
	}
	if err := b.Truncate(1); !errors.Is(err, cache.ErrFailed) {
		t.Errorf("Truncate after a failure = %v, want ErrFailed", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close of a failed buffer = %v", err)
	}
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, []record{{1, 0, []byte("kept")}})
}

func TestReplayStopsOnCallbackError(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	for range 3 {
		mustAppend(t, b, 0, nil)
	}
	stop := errors.New("stop")
	calls := 0
	err := b.Replay(func(seq cache.Seq, _ cache.Kind, _ []byte) error {
		calls++
		if seq == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Fatalf("Replay = %v after %d calls, want the callback's error after 2", err, calls)
	}
	// fn may release what it has seen.
	err = b.Replay(func(seq cache.Seq, _ cache.Kind, _ []byte) error { return b.Release(seq) })
	if err != nil || b.Stats().Live != 0 {
		t.Fatalf("Replay releasing as it goes = %v, %d live", err, b.Stats().Live)
	}
}
