package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/cache"
	"basalt/pkg/clock"
	"basalt/pkg/identity"
	"basalt/pkg/pmem"
)

func testStamp(node byte) identity.Stamp {
	return identity.Stamp{Cluster: identity.ClusterUUID{0xc1, 15: 1}, Node: identity.NodeUUID{0xa0, 15: node}}
}

func TestIdentityRecordRoundTripAndMalformed(t *testing.T) {
	var b recordBuilder
	good := joinPieces(b.identityRecord(testStamp(3)))
	r, err := decodeRecord(kindIdentity, good)
	if err != nil || r.stamp != testStamp(3) || r.group != 0 {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	edit := func(f func(p []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	bad := map[string][]byte{
		"short":      good[:len(good)-1],
		"long":       append(append([]byte(nil), good...), 0),
		"group":      edit(func(p []byte) []byte { p[8] = 1; return p }),
		"flags":      edit(func(p []byte) []byte { p[1] = 1; return p }),
		"count":      edit(func(p []byte) []byte { p[4] = 1; return p }),
		"hard state": edit(func(p []byte) []byte { p[16] = 1; return p }),
		"zero node":  edit(func(p []byte) []byte { clear(p[56:72]); return p }),
		"zero clus":  edit(func(p []byte) []byte { clear(p[40:56]); return p }),
	}
	for name, p := range bad {
		if _, err := decodeRecord(kindIdentity, p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// Group 0 stays refused in every other kind.
	if _, err := decodeRecord(kindRemove, joinPieces(b.removeRecord(0))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("remove record of group 0: %v", err)
	}
}

// TestStampIdentity: a log is stamped once, keeps its stamp across a reopen,
// accepts the same stamp again and refuses another.
func TestStampIdentity(t *testing.T) {
	region := pmem.NewFake(4096+1<<20, 1)
	open := func() *Host {
		h, err := NewHost(Config{NodeID: 1, LogRegion: region, Logger: testLogger(), Transport: NewSimNetwork(1, nil).Endpoint(1),
			Manual: true})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	if s, ok := h.Identity(); ok || !s.IsZero() {
		t.Fatalf("a new log carries %v", s)
	}
	ctx := context.Background()
	if err := h.StampIdentity(ctx, identity.Stamp{Node: testStamp(1).Node}); !errors.Is(err, ErrConfig) {
		t.Errorf("half a stamp: %v", err)
	}
	if err := h.StampIdentity(ctx, testStamp(1)); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = open()
	defer h.Close()
	if s, ok := h.Identity(); !ok || s != testStamp(1) {
		t.Fatalf("after reopen: %v %v", s, ok)
	}
	if err := h.StampIdentity(ctx, testStamp(1)); err != nil {
		t.Errorf("the same stamp again: %v", err)
	}
	if err := h.StampIdentity(ctx, testStamp(2)); !errors.Is(err, ErrIdentityMismatch) {
		t.Errorf("another stamp: %v", err)
	}
}

// TestIdentityRecordsThatDisagreeAreCorrupt: recovery refuses a log whose
// identity copies name different nodes.
func TestIdentityRecordsThatDisagreeAreCorrupt(t *testing.T) {
	region := pmem.NewFake(4096+1<<20, 1)
	buf, err := cache.Open(region, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b recordBuilder
	for _, node := range []byte{1, 2} {
		if _, err := buf.Append(context.Background(), kindIdentity, b.identityRecord(testStamp(node))...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := recoverLog(buf); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("recovery: %v, want ErrCorrupt", err)
	}
}

// TestIdentitySurvivesTheReleaser writes a few times the log's size through a
// one-member volume, so that the releaser frees every record written before
// the writes several times over, and checks that the log still carries its
// stamp after a crash (Manual mode) or a reopen (with the loops and the
// releaser on their goroutines). Without the identity's pin the releaser
// frees the only identity record with the first lap.
func TestIdentitySurvivesTheReleaser(t *testing.T) {
	for _, manual := range []bool{true, false} {
		name := map[bool]string{true: "manual", false: "goroutines"}[manual]
		t.Run(name, func(t *testing.T) {
			region := pmem.NewFake(4096+1<<20, 7)
			clk := clock.NewManual(testEpoch)
			open := func() *Host {
				cfg := Config{NodeID: 1, LogRegion: region, Logger: testLogger(), Manual: manual,
					TickInterval: 10 * time.Millisecond, Listen: "127.0.0.1:0"}
				if manual {
					cfg.Clock, cfg.Transport = clk, NewSimNetwork(1, clk).Endpoint(1)
				}
				h, err := NewHost(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Start(); err != nil {
					t.Fatal(err)
				}
				return h
			}
			h := open()
			if err := h.StampIdentity(context.Background(), testStamp(1)); err != nil {
				t.Fatal(err)
			}
			first := cache.Seq(h.ident.pin.Load())
			v, err := addBlockSM(h, 1, []NodeID{1}, newBlockSM(testVolumeSize))
			if err != nil {
				t.Fatal(err)
			}
			waitLeader(t, h, v, clk, manual)
			writeLaps(t, h, v, manual, 4<<20)
			if st := h.Stats(); st.First <= first {
				t.Fatalf("the buffer was never released past the first identity record %v: %+v", first, st.Stats)
			}
			if manual { // idle, the releaser copies the record at most once more
				last := h.Stats().Last
				for range 2000 {
					clk.Advance(time.Millisecond)
					h.Poll()
				}
				if st := h.Stats(); st.Last > last+1 {
					t.Errorf("an idle host wrote %d records", st.Last-last)
				}
				region = region.CrashRegion()
			} else if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			h = open()
			defer h.Close()
			if s, ok := h.Identity(); !ok || s != testStamp(1) {
				t.Fatalf("after %s the log carries %v (ok %v), want %v", map[bool]string{true: "a crash", false: "a reopen"}[manual],
					s, ok, testStamp(1))
			}
		})
	}
}

// waitLeader waits until the one-member group leads (Manual mode: moving the
// clock and polling).
func waitLeader(t *testing.T, h *Host, v *blockSM, clk *clock.Manual, manual bool) {
	t.Helper()
	for i := 0; !v.Group().IsLeader(); i++ {
		if i > 10000 {
			t.Fatal("the one member never led its group")
		}
		if manual {
			clk.Advance(time.Millisecond)
			h.Poll()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// writeLaps writes total bytes in 4 KiB blocks through v, polling h in
// Manual mode.
func writeLaps(t *testing.T, h *Host, v *blockSM, manual bool, total int) {
	t.Helper()
	block := make([]byte, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range total / len(block) {
		block[0] = byte(i)
		off := int64(i%(testVolumeSize/len(block))) * int64(len(block))
		if !manual {
			if err := v.WriteAt(ctx, block, off); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			continue
		}
		var result error = errPending
		v.WriteAtAsync(block, off, func(err error) { result = err })
		for n := 0; result == errPending; n++ {
			if n > 100000 {
				t.Fatalf("write %d never completed: %+v", i, h.Stats())
			}
			h.Poll()
		}
		if result != nil {
			t.Fatalf("write %d: %v", i, result)
		}
	}
}

// TestIdentityDoesNotHideAnIdleGroupsPin: with the identity record the
// oldest and an idle group's state record right above it, the releaser must
// still ask the idle group to checkpoint under pressure (then copy the
// identity record and free past both). When the identity's pin stood in for
// the lowest pin, no group was asked, and a busy group's writes stalled for
// ever once the buffer filled.
func TestIdentityDoesNotHideAnIdleGroupsPin(t *testing.T) {
	c := newSimCluster(t, 23, func(cfg *Config) { cfg.CompactionMargin = 8 })
	for _, id := range c.members {
		c.regions[id] = pmem.NewFake(4096+256<<10, int64(id))
		h, err := NewHost(Config{NodeID: id, LogRegion: c.regions[id], Clock: c.clock, Logger: testLogger().With("node", id),
			Transport: c.net.Endpoint(id), Manual: true, TickInterval: 10 * time.Millisecond, CompactionMargin: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		if err := h.StampIdentity(context.Background(), testStamp(byte(id))); err != nil {
			t.Fatal(err)
		}
		if _, err := addBlockSM(h, 2, c.members, newBlockSM(testVolumeSize)); err != nil { // its state record right above the identity's
			t.Fatal(err)
		}
		v, err := addBlockSM(h, 1, c.members, c.locals[id])
		if err != nil {
			t.Fatal(err)
		}
		c.hosts[id], c.vols[id] = h, v
	}
	leader := c.leader()
	for i := range 300 { // 300 x 4 KiB: several times the 256 KiB buffer
		if err := c.write(leader, int64(i%64), byte(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for _, id := range c.members {
		st := c.hosts[id].Stats()
		if st.Used*4 > st.Size*3 {
			t.Errorf("%v: buffer %d of %d bytes used", id, st.Used, st.Size)
		}
		c.crash(id)
		h, err := NewHost(Config{NodeID: id, LogRegion: c.regions[id], Logger: testLogger(), Transport: c.net.Endpoint(id),
			Manual: true})
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := h.Identity(); !ok || s != testStamp(byte(id)) {
			t.Errorf("%v after a crash: %v %v", id, s, ok)
		}
		_ = h.Close()
	}
}
