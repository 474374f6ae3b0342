package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
)

// NVMeConfig selects a Basalt volume over NVMe/TCP.
type NVMeConfig struct {
	// Addrs are the paths ("host:port"), one controller each, all exporting
	// the same subsystem. I/O goes to a path whose ANA state for the
	// namespace is optimized (else non-optimized), like Linux native
	// multipath; a failed path is retried elsewhere and redialled in the
	// background.
	Addrs   []string
	NQN     string
	HostNQN string
	NSID    uint32 // default 1
	// Queues and QueueDepth size every controller's I/O queues (the bench
	// asks for one queue per job).
	Queues     int
	QueueDepth int
	// PathTimeout bounds how long an I/O waits for a usable path (Linux
	// queues I/O while no path is usable, up to ctrl_loss_tmo). Default 60 s.
	PathTimeout time.Duration
	// ReconnectDelay is the pause between redial attempts (Linux
	// reconnect_delay). Default 1 s.
	ReconnectDelay time.Duration
	Logger         *slog.Logger
	Clock          clock.Clock
}

// nvmePath is one address and its current association (nil while down).
type nvmePath struct {
	addr string
	ctrl atomic.Pointer[host.Controller]
}

// NVMeDevice is a Device over one or several NVMe/TCP paths.
type NVMeDevice struct {
	cfg    NVMeConfig
	opts   host.Options
	paths  []*nvmePath
	ns     host.Namespace
	maxXfr int
	next   atomic.Uint32
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// DialNVMe connects to every path (at least one must answer) and starts
// the background redialler.
func DialNVMe(ctx context.Context, cfg NVMeConfig) (*NVMeDevice, error) {
	if len(cfg.Addrs) == 0 || cfg.NQN == "" {
		return nil, fmt.Errorf("%w: need at least one address and a subsystem NQN", ErrInvalidSpec)
	}
	if cfg.NSID == 0 {
		cfg.NSID = 1
	}
	if cfg.PathTimeout <= 0 {
		cfg.PathTimeout = 60 * time.Second
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &NVMeDevice{cfg: cfg, opts: host.Options{SubNQN: cfg.NQN, HostNQN: cfg.HostNQN,
		IOQueues: max(cfg.Queues, 1), QueueDepth: min(max(cfg.QueueDepth+1, 2), host.QueueDepthMax),
		Logger: cfg.Logger, Clock: cfg.Clock}}
	d.opts.EnsureDefaults() // one HostID and HostNQN for every path
	var errs []error
	for _, a := range cfg.Addrs {
		p := &nvmePath{addr: a}
		d.paths = append(d.paths, p)
		c, err := host.Dial(ctx, a, d.opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.ctrl.Store(c)
		if d.ns.NSID == 0 {
			if err := d.learn(c); err != nil {
				d.closePaths()
				return nil, err
			}
		}
	}
	if d.ns.NSID == 0 {
		return nil, fmt.Errorf("bench: no path to %s answered: %w", cfg.NQN, errors.Join(errs...))
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.bg.Add(1)
	go d.redial()
	return d, nil
}

func (d *NVMeDevice) learn(c *host.Controller) error {
	ns, ok := c.Namespace(d.cfg.NSID)
	if !ok {
		return fmt.Errorf("bench: %s has no namespace %d for this host", d.cfg.NQN, d.cfg.NSID)
	}
	d.ns, d.maxXfr = ns, c.MaxTransferSize()
	return nil
}

// redial replaces lost associations every ReconnectDelay until Close.
func (d *NVMeDevice) redial() {
	defer d.bg.Done()
	t := d.cfg.Clock.NewTicker(d.cfg.ReconnectDelay)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C():
		}
		for _, p := range d.paths {
			if c := p.ctrl.Load(); c != nil && c.Err() == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
			c, err := host.Dial(ctx, p.addr, d.opts)
			cancel()
			if err != nil {
				d.cfg.Logger.Debug("bench: redial failed", "addr", p.addr, "err", err)
				continue
			}
			d.cfg.Logger.Info("bench: path reconnected", "addr", p.addr)
			if old := p.ctrl.Swap(c); old != nil {
				old.Close()
			}
		}
	}
}

// Describe implements Device.
func (d *NVMeDevice) Describe() string {
	addrs := make([]string, len(d.paths))
	for i, p := range d.paths {
		addrs[i] = p.addr
	}
	return fmt.Sprintf("nvme-tcp %s %s/%d", strings.Join(addrs, ","), d.cfg.NQN, d.cfg.NSID)
}

// LBASize implements Device.
func (d *NVMeDevice) LBASize() int { return d.ns.BlockSize }

// Size implements Device.
func (d *NVMeDevice) Size() int64 { return d.ns.Size() }

// MaxTransfer implements Device.
func (d *NVMeDevice) MaxTransfer() int { return d.maxXfr }

// Close stops the redialler and closes every association.
func (d *NVMeDevice) Close() error {
	d.cancel()
	d.bg.Wait()
	d.closePaths()
	return nil
}

func (d *NVMeDevice) closePaths() {
	for _, p := range d.paths {
		if c := p.ctrl.Swap(nil); c != nil {
			c.Close()
		}
	}
}

// pick returns a live controller whose ANA state for the namespace is
// optimized (round robin among those), else a non-optimized one, else nil.
// avoid is skipped unless nothing else is usable.
func (d *NVMeDevice) pick(avoid *host.Controller) *host.Controller {
	n := len(d.paths)
	start := 0
	if n > 1 {
		start = int(d.next.Add(1)-1) % n
	}
	var fallback, avoided *host.Controller
	for i := range n {
		c := d.paths[(start+i)%n].ctrl.Load()
		if c == nil || c.Err() != nil {
			continue
		}
		st, _ := c.ANAState(d.cfg.NSID)
		if st != nvme.ANAOptimized && st != nvme.ANANonOptimized {
			continue
		}
		switch {
		case c == avoid:
			avoided = c
		case st == nvme.ANAOptimized:
			return c
		case fallback == nil:
			fallback = c
		}
	}
	if fallback != nil {
		return fallback
	}
	return avoided
}

// refreshAll re-reads the ANA log of every live path (after an ANA status,
// or while no path is usable).
func (d *NVMeDevice) refreshAll() {
	for _, p := range d.paths {
		if c := p.ctrl.Load(); c != nil && c.Err() == nil {
			ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
			c.RefreshANA(ctx) //nolint:errcheck // a failing path drops out of pick
			cancel()
		}
	}
}
