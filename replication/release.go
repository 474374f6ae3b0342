package replication

import (
	"sync"
	"sync/atomic"
	"time"

	"basalt/cache"
)

// releaser frees the write buffer behind the slowest group (doc.go,
// "Releasing the buffer"). The buffer is one FIFO log shared by every group,
// and cache.Buffer.Release frees a prefix; so the releaser frees up to just
// below the smallest pin over all groups, where a group's pin is the oldest
// record it still needs (its newest state record, or the record of its first
// uncompacted entry). A group that writes nothing keeps an old pin; when the
// buffer is more than half full, the releaser asks the group holding the
// smallest pin to checkpoint: to compact to its durable applied index and
// rewrite what it still needs into one new record. It asks once per pin;
// the group keeps the request until its pin has moved (compact.go).
type releaser struct {
	h      *Host
	wakeCh chan struct{}
	// pressure is set while the buffer is more than half full; groups then
	// compact to their durable applied index, without a margin.
	pressure atomic.Bool

	mu struct {
		sync.Mutex
		released cache.Seq            // everything up to here is released
		asked    map[GroupID]uint64   // pin at which a checkpoint was last requested
		warned   map[GroupID]struct{} // dormant groups already warned about
	}
}

// releaseInterval is how often the releaser looks without being woken.
const releaseInterval = time.Second

func (r *releaser) init(h *Host) {
	r.h = h
	r.wakeCh = make(chan struct{}, 1)
	r.mu.released = h.buf.Stats().First - 1
	r.mu.asked = make(map[GroupID]uint64)
	r.mu.warned = make(map[GroupID]struct{})
}

// wake asks the releaser to look now; it never blocks.
func (r *releaser) wake() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

func (r *releaser) run() {
	defer r.h.wg.Done()
	ticker := r.h.clock.NewTicker(releaseInterval)
	defer ticker.Stop()
	for {
		select {
		case <-r.h.ctx.Done():
			return
		case <-r.wakeCh:
		case <-ticker.C():
		}
		r.releaseOnce()
	}
}

// pinner is the holder of the smallest pin.
type pinner struct {
	pin     uint64
	group   GroupID
	live    *Group // nil for a dormant or removing group
	dormant bool
}

// releaseOnce releases up to the smallest pin and, under pressure, asks the
// pinning group to checkpoint.
func (r *releaser) releaseOnce() {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	// Read the last seq before the pins: a group registers its pin before it
	// appends, so a record appended after this read is either counted by its
	// group's pin or above last.
	stats := h.buf.Stats()
	low := r.lowestPin(uint64(stats.Last) + 1)
	if upTo := cache.Seq(h.keepIdentity(h.keepTombstones(low.pin)) - 1); upTo > r.mu.released { // identity.go, tombstone.go
		if err := h.buf.Release(upTo); err != nil {
			h.log.Error("releasing the write buffer failed", "up_to", upTo, "err", err)
			return
		}
		r.mu.released = upTo
		r.wakeStarved()
	}
	pressure := stats.Size > 0 && stats.Used*2 > stats.Size
	r.pressure.Store(pressure)
	if !pressure || low.group == 0 {
		return
	}
	switch {
	case low.live != nil && r.mu.asked[low.group] != low.pin:
		r.mu.asked[low.group] = low.pin
		low.live.requestCheckpoint()
	case low.dormant:
		if _, ok := r.mu.warned[low.group]; !ok {
			r.mu.warned[low.group] = struct{}{}
			h.log.Warn("a recovered group that was not added again pins the write buffer; add or remove it",
				"group", low.group, "used", stats.Used, "size", stats.Size)
		}
	}
}

// wakeStarved wakes the loops that held entries back for lack of space.
func (r *releaser) wakeStarved() {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.mu.groups {
		if g.starved.Swap(false) {
			g.wake()
		}
	}
}

func (r *releaser) lowestPin(limit uint64) pinner {
	h := r.h
	low := pinner{pin: limit}
	consider := func(id GroupID, s *logStorage, g *Group, dormant bool) {
		p := s.pin.Load()
		if p != 0 && (p < low.pin || (p == low.pin && id < low.group)) {
			low = pinner{pin: p, group: id, live: g, dormant: dormant}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, g := range h.mu.groups {
		consider(id, g.storage, g, false)
	}
	for id, s := range h.mu.dormant {
		consider(id, s, nil, true)
	}
	for id, s := range h.mu.removing {
		consider(id, s, nil, false)
	}
	return low
}
