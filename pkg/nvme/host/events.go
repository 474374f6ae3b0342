package host

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"basalt/pkg/nvme"
)

// AsyncEvent is one asynchronous event: completion DW0 of an Asynchronous
// Event Request (NVMe Base 2.0 §5.2, Figure 146).
type AsyncEvent struct {
	DW0 uint32
}

// Type returns the event type (bits 2:0): 0 error, 1 SMART, 2 notice, 6 I/O
// command set specific, 7 vendor.
func (e AsyncEvent) Type() uint8 { return uint8(e.DW0 & 0x7) }

// Info returns the event information (bits 15:8).
func (e AsyncEvent) Info() uint8 { return uint8(e.DW0 >> 8) }

// LID returns the log page to read to clear the event (bits 23:16).
func (e AsyncEvent) LID() uint8 { return uint8(e.DW0 >> 16) }

// aenSupported are the OAES bits the Linux host enables (NVME_AEN_SUPPORTED).
const aenSupported = nvme.AECNSAttrChanged | nvme.AECFirmwareActive | nvme.AECANAChange | nvme.AECDiscoveryChange

// eventQueueSize bounds the events kept for WaitAsyncEvent; when it is full
// the oldest event is dropped (the host's own handling still happened).
const eventQueueSize = 16

// eventTimeout bounds the admin commands the host sends on an event.
const eventTimeout = 30 * time.Second

// eventState keeps exactly one AER outstanding (Linux NVME_NR_AEN_COMMANDS)
// in the admin queue's reserved slot.
type eventState struct {
	enabled bool
	aer     IO
	raw     chan uint32 // from the AER callback to the event goroutine; cap 1
	user    chan AsyncEvent
	ana     atomic.Pointer[ANALog] // last ANA log read
}

// enableAsyncEvents does what Linux nvme_enable_aen does: if OAES has any
// event the host supports, Set Features Asynchronous Event Configuration
// (failure only warns) and submit the AER.
func (c *Controller) enableAsyncEvents(ctx context.Context) {
	supported := c.id.OAES & aenSupported
	if supported == 0 {
		return
	}
	if _, err := c.SetFeature(ctx, nvme.FeatAsyncEventConfig, supported); err != nil {
		c.log.Warn("nvme host: Failed to configure AEN", "cfg", supported, "err", err)
	}
	e := &c.events
	e.enabled = true
	e.raw = make(chan uint32, 1)
	e.user = make(chan AsyncEvent, eventQueueSize)
	e.aer.Done = c.aerDone
	c.bg.Add(1)
	go c.handleEvents()
	c.submitAER()
}

// submitAER sends the Asynchronous Event Request from the reserved slot.
func (c *Controller) submitAER() {
	q := c.admin
	s := &q.slots[q.reservedFrom]
	s.cmd = nvme.Command{}
	s.cmd.SetOpcode(nvme.AdminAsyncEventReq)
	prepareData(s, nil, nil, 0)
	s.io = &c.events.aer
	if err := q.start(s, sendDeferred); err != nil {
		c.log.Debug("nvme host: AER not submitted", "err", err)
	}
}

// aerDone runs on the admin receive goroutine. Like Linux
// nvme_complete_async_event, an error status stops event reporting.
func (c *Controller) aerDone(io *IO) {
	switch {
	case io.Err == nil:
		c.events.raw <- io.DW0
	case errors.Is(io.Err, ErrConnectionLost):
	default:
		c.log.Warn("nvme host: Asynchronous Event Request failed; no more events", "err", io.Err)
	}
}

// handleEvents is the event goroutine: it does what the Linux host does for
// a notice (re-read the ANA log on 0x000C0302, clear the Changed Namespace
// List and rescan on 0x00040002), queues the event for WaitAsyncEvent and
// resubmits the AER.
func (c *Controller) handleEvents() {
	defer c.bg.Done()
	for {
		select {
		case dw0 := <-c.events.raw:
			c.handleEvent(dw0)
			c.queueEvent(AsyncEvent{DW0: dw0})
			c.submitAER()
		case <-c.dead:
			return
		}
	}
}

func (c *Controller) handleEvent(dw0 uint32) {
	ctx, cancel := c.withTimeout(context.Background(), eventTimeout)
	defer cancel()
	switch dw0 {
	case nvme.AENANAChange:
		if c.id.CMIC&(1<<3) != 0 {
			if l, err := c.ANALog(ctx); err != nil {
				c.log.Warn("nvme host: re-reading the ANA log failed", "err", err)
			} else {
				c.events.ana.Store(&l)
			}
		}
	case nvme.AENNSAttrChanged:
		buf := make([]byte, nvme.ChangedNSListSize)
		if err := c.GetLogPage(ctx, nvme.LogChangedNSList, nvme.NSIDAll, 0, 0, buf); err != nil {
			c.log.Warn("nvme host: reading the Changed Namespace List failed", "err", err)
		}
		if err := c.scanNamespaces(ctx); err != nil {
			c.log.Warn("nvme host: namespace rescan failed", "err", err)
		}
	}
}

func (c *Controller) queueEvent(ev AsyncEvent) {
	for {
		select {
		case c.events.user <- ev:
			return
		default:
		}
		select {
		case old := <-c.events.user:
			c.log.Warn("nvme host: asynchronous event dropped, nobody waits for events", "dw0", old.DW0)
		default:
		}
	}
}

// WaitAsyncEvent returns the next asynchronous event. The host keeps one
// Asynchronous Event Request outstanding from Dial on and has already acted
// on the event the way Linux does (see handleEvents) when it is returned.
// It returns ErrNoAsyncEvents if the controller reports none the host
// enables, ctx's error, or the association's error.
func (c *Controller) WaitAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if !c.events.enabled {
		return AsyncEvent{}, ErrNoAsyncEvents
	}
	select {
	case ev := <-c.events.user:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	case <-c.dead:
		return AsyncEvent{}, c.failErr
	}
}

// startKeepAlive starts the keep-alive goroutine if KATO is not 0: a Keep
// Alive every KATO/2, each bounded by KATO; a timeout tears the association
// down, an error status stops keep-alives (Linux nvme_keep_alive_end_io).
func (c *Controller) startKeepAlive() {
	if c.opts.KATO == KeepAliveDisabled {
		return
	}
	c.bg.Add(1)
	go c.keepAlive(c.opts.KATO/2, c.opts.KATO)
}

func (c *Controller) keepAlive(period, timeout time.Duration) {
	defer c.bg.Done()
	t := c.opts.Clock.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C():
		case <-c.dead:
			return
		}
		ctx, cancel := c.withTimeout(context.Background(), timeout)
		err := c.KeepAlive(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrConnectionLost) {
				c.log.Warn("nvme host: failed nvme_keep_alive; stopping keep-alive", "err", err)
			}
			return
		}
	}
}

// withTimeout is context.WithTimeout on the controller's clock.
func (c *Controller) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := c.opts.Clock.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
		t.Stop()
	}()
	return ctx, func() { cancel(context.Canceled) }
}
