package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/nvme"
)

// MultiPath sends I/O for the namespaces of one subsystem over several
// Controllers (paths), as a simple model of Linux native multipath
// (drivers/nvme/host/multipath.c):
//
//   - A path is usable for a namespace when its association is up and its
//     ANA state for the namespace is optimized or non-optimized; a
//     controller without ANA reporting (CMIC bit 3 clear) counts as
//     optimized. Optimized paths are preferred and used round robin;
//     non-optimized ones only when no optimized path is usable.
//   - A command that fails with a path error (IsPathError: SCT 3 without
//     DNR, or a lost connection) is retried on another path. After an ANA
//     status (0x301-0x303) the path's ANA log is re-read first, as Linux
//     marks the path ANA-pending and re-reads the log. Errors with DNR and
//     all other statuses are returned as they are.
//   - When no path is usable but some association is up, Linux queues the
//     I/O until a path returns; MultiPath instead re-reads the ANA logs
//     every retryInterval until ctx ends. With no association left it
//     returns ErrNoPath.
//
// Not modelled: reconnecting lost paths, the numa and queue-depth I/O
// policies, ANATT timers. MultiPath does not own the Controllers.
type MultiPath struct {
	paths atomic.Pointer[[]*Controller] // replaced whole by AddPath
	mu    struct {
		sync.Mutex
		next int // round-robin position
	}
}

// retryInterval is how often MultiPath re-checks paths while none is usable.
const retryInterval = 100 * time.Millisecond

// NewMultiPath returns a MultiPath over ctrls, which must be connected to the
// same subsystem.
func NewMultiPath(ctrls ...*Controller) *MultiPath {
	m := &MultiPath{}
	paths := append([]*Controller(nil), ctrls...)
	m.paths.Store(&paths)
	return m
}

// AddPath adds a path, as a host's rescan does when the discovery log lists
// a new one (a replica added to the volume).
func (m *MultiPath) AddPath(c *Controller) {
	m.mu.Lock()
	defer m.mu.Unlock()
	paths := append(slices.Clone(*m.paths.Load()), c)
	m.paths.Store(&paths)
}

func (m *MultiPath) list() []*Controller { return *m.paths.Load() }

// PathState is the state of one path for one namespace.
type PathState struct {
	Controller *Controller
	ANA        nvme.ANAState // 0 if unknown
	Live       bool
}

// Paths returns each path's state for nsid, in the order given to NewMultiPath.
func (m *MultiPath) Paths(nsid uint32) []PathState {
	paths := m.list()
	out := make([]PathState, len(paths))
	for i, c := range paths {
		st, _ := c.ANAState(nsid)
		out[i] = PathState{Controller: c, ANA: st, Live: c.Err() == nil}
	}
	return out
}

// ANAState returns the ANA state of nsid from the last ANA log the
// controller read (at Dial, after an ANA change event, or RefreshANA), or
// optimized for a controller without ANA reporting.
func (c *Controller) ANAState(nsid uint32) (nvme.ANAState, bool) {
	if c.id.CMIC&(1<<3) == 0 {
		return nvme.ANAOptimized, true
	}
	l := c.events.ana.Load()
	if l == nil {
		return 0, false
	}
	return l.StateOf(nsid)
}

// RefreshANA re-reads the ANA log into the controller's cache.
func (c *Controller) RefreshANA(ctx context.Context) error {
	if c.id.CMIC&(1<<3) == 0 {
		return nil
	}
	l, err := c.ANALog(ctx)
	if err != nil {
		return err
	}
	c.events.ana.Store(&l)
	return nil
}

// choose returns a usable path for nsid, skipping the ones in avoid.
func (m *MultiPath) choose(nsid uint32, avoid map[*Controller]bool) (c *Controller, anyLive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var fallback *Controller
	paths := m.list()
	n := len(paths)
	for i := 0; i < n; i++ {
		p := paths[(m.mu.next+i)%n]
		if p.Err() != nil {
			continue
		}
		anyLive = true
		if avoid[p] {
			continue
		}
		switch st, _ := p.ANAState(nsid); st {
		case nvme.ANAOptimized:
			m.mu.next = (m.mu.next + i + 1) % n
			return p, true
		case nvme.ANANonOptimized:
			if fallback == nil {
				fallback = p
			}
		}
	}
	return fallback, anyLive
}

// Do runs op on a usable path for nsid, failing over on path errors.
func (m *MultiPath) Do(ctx context.Context, nsid uint32, op func(*Controller) error) error {
	avoid := map[*Controller]bool{}
	var last error
	for {
		c, anyLive := m.choose(nsid, avoid)
		if c == nil {
			if !anyLive {
				return fmt.Errorf("%w for namespace %d: %w", ErrNoPath, nsid, errors.Join(last, errNoLivePath))
			}
			if err := m.waitForPath(ctx); err != nil {
				return fmt.Errorf("%w for namespace %d: %w", ErrNoPath, nsid, errors.Join(last, err))
			}
			clear(avoid)
			continue
		}
		err := op(c)
		if err == nil || !IsPathError(err) {
			return err
		}
		last = err
		avoid[c] = true
		if IsANAError(err) {
			if rerr := c.RefreshANA(ctx); rerr != nil {
				c.log.Warn("nvme host: re-reading the ANA log after a path error failed", "err", rerr)
			}
		}
	}
}

var errNoLivePath = errors.New("no controller is connected")

// waitForPath sleeps retryInterval, then re-reads every live path's ANA log.
func (m *MultiPath) waitForPath(ctx context.Context) error {
	paths := m.list()
	if len(paths) == 0 {
		return errNoLivePath
	}
	t := paths[0].opts.Clock.NewTimer(retryInterval)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	for _, c := range paths {
		if c.Err() == nil {
			c.RefreshANA(ctx) //nolint:errcheck // a failing path is skipped by choose
		}
	}
	return nil
}

// Read reads from a usable path (see Controller.Read).
func (m *MultiPath) Read(ctx context.Context, nsid uint32, slba uint64, buf []byte) error {
	return m.Do(ctx, nsid, func(c *Controller) error { return c.Read(ctx, nsid, slba, buf) })
}

// Write writes through a usable path (see Controller.Write).
func (m *MultiPath) Write(ctx context.Context, nsid uint32, slba uint64, buf []byte, fua bool) error {
	return m.Do(ctx, nsid, func(c *Controller) error { return c.Write(ctx, nsid, slba, buf, fua) })
}

// Flush flushes through a usable path (see Controller.Flush).
func (m *MultiPath) Flush(ctx context.Context, nsid uint32) error {
	return m.Do(ctx, nsid, func(c *Controller) error { return c.Flush(ctx, nsid) })
}
