package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"basalt/pkg/nvme"
)

// Controller is an association with one NVMe-oF controller: an admin queue
// and zero or more I/O queues, each its own TCP connection. All methods are
// safe for concurrent use.
//
// When any connection fails (closed by the controller, C2HTermReq, protocol
// violation, keep-alive or command timeout) the whole association is torn
// down, as the Linux host's error recovery does, and every method returns a
// *ConnectionError from then on. The Controller does not reconnect: Dial
// again (or use MultiPath) for a new association.
type Controller struct {
	opts Options
	addr string
	log  *slog.Logger

	// authTID numbers DH-HMAC-CHAP transactions (auth.go).
	authTID atomic.Uint32

	// Set during Dial, read-only afterwards.
	admin     *queue
	io        []*queue
	cntlid    uint16
	cap       uint64
	vs        uint32
	id        nvme.IdentifyController
	discovery bool
	// maxTransfer is the largest data transfer in bytes (MDTS), 0 = no limit.
	maxTransfer int
	ioInlineMax int

	next      atomic.Uint32 // round-robin I/O queue choice
	callbacks atomic.Int32  // IO.Done callbacks running

	namespaces namespaceTable
	events     eventState

	qmu struct {
		sync.Mutex
		all []*queue // every queue ever added, for fail and Close
	}
	failed   atomic.Bool
	failErr  error         // set before dead is closed
	dead     chan struct{} // closed when the association has failed or closed
	bg       sync.WaitGroup
	closeErr error
	closing  sync.Once
}

func newController(addr string, opts Options) *Controller {
	return &Controller{opts: opts, addr: addr, log: opts.Logger, dead: make(chan struct{})}
}

// Dial connects to the NVM subsystem opts.SubNQN at addr ("host:port") and
// brings the controller up with the Linux host's exact sequence (see the
// package documentation): admin queue, enable, Identify and its checks, keep
// alive, Number of Queues, I/O queues, asynchronous events, namespace scan.
// ctx bounds the whole sequence. On failure everything opened is closed.
func Dial(ctx context.Context, addr string, opts Options) (*Controller, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := newController(addr, opts)
	if err := c.setUp(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Controller) setUp(ctx context.Context) error {
	if err := c.connectAdmin(ctx); err != nil {
		return err
	}
	if err := c.enable(ctx); err != nil {
		return err
	}
	if err := c.identifyAndCheck(ctx); err != nil {
		return err
	}
	if err := c.readInitLogs(ctx); err != nil {
		return err
	}
	c.startKeepAlive()
	if !c.discovery {
		if err := c.connectIOQueues(ctx); err != nil {
			return err
		}
	}
	c.enableAsyncEvents(ctx)
	if !c.discovery {
		return c.scanNamespaces(ctx)
	}
	return nil
}

// connectAdmin connects the admin queue (QID 0, SQSIZE 31, CNTLID FFFFh).
func (c *Controller) connectAdmin(ctx context.Context) error {
	q, cpl, err := c.connectQueue(ctx, queueParams{
		qid: 0, sqsize: adminQueueDepth - 1, kato: c.opts.katoMillis(), cntlid: nvme.CNTLIDDynamic,
		reserved: 1, inlineMax: fabricsInlineMax,
	})
	if err != nil {
		return fmt.Errorf("host: admin Connect to %s (%s): %w", c.addr, c.opts.SubNQN, err)
	}
	c.admin, c.cntlid = q, uint16(cpl.DW0)
	return nil
}

// connectIOQueues asks for opts.IOQueues with Set Features Number of Queues
// and connects as many as granted, each with Connect(qid, SQSIZE, CNTLID).
func (c *Controller) connectIOQueues(ctx context.Context) error {
	n, err := c.setQueueCount(ctx, c.opts.IOQueues)
	if err != nil {
		return err
	}
	sqsize := c.ioSQSIZE()
	c.ioInlineMax = int(c.id.IOCCSZ)*16 - nvme.SQESize
	qs := make([]*queue, 0, n)
	for i := 1; i <= n; i++ {
		q, _, err := c.connectQueue(ctx, queueParams{
			qid: uint16(i), sqsize: sqsize, cntlid: c.cntlid, inlineMax: c.ioInlineMax,
		})
		if err != nil {
			return fmt.Errorf("host: I/O queue %d Connect: %w", i, err)
		}
		qs = append(qs, q)
	}
	c.io = qs
	return nil
}

// ioSQSIZE is min(QueueDepth, CAP.MQES+1, MAXCMD) - 1 (Linux nvme_tcp_setup_ctrl).
func (c *Controller) ioSQSIZE() uint16 {
	depth := min(c.opts.QueueDepth, int(capMQES(c.cap))+1)
	if int(c.id.MAXCMD) < depth {
		depth = int(c.id.MAXCMD)
	}
	return uint16(depth - 1)
}

// setQueueCount sends Set Features Number of Queues and returns how many I/O
// queues to use: min(asked, NSQA+1, NCQA+1). Failure is fatal, as for the
// Linux TCP host ("unable to set any I/O queues").
func (c *Controller) setQueueCount(ctx context.Context, n int) (int, error) {
	v := uint32(n-1) | uint32(n-1)<<16
	dw0, err := c.SetFeature(ctx, nvme.FeatNumberOfQueues, v)
	if err != nil {
		return 0, fmt.Errorf("host: unable to set any I/O queues: %w", err)
	}
	granted := int(min(uint16(dw0), uint16(dw0>>16))) + 1
	return min(n, granted), nil
}

// addQueue records q; it returns false if the association already failed.
func (c *Controller) addQueue(q *queue) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.failed.Load() {
		return false
	}
	c.qmu.all = append(c.qmu.all, q)
	return true
}

// fail tears the association down: every queue's connection is closed and
// its commands in flight fail. The first cause is kept.
func (c *Controller) fail(cause error) {
	if !c.failed.CompareAndSwap(false, true) {
		return
	}
	var ce *ConnectionError
	if errors.As(cause, &ce) {
		c.failErr = ce
	} else {
		c.failErr = &ConnectionError{QID: 0, Cause: cause}
	}
	close(c.dead)
	c.qmu.Lock()
	qs := c.qmu.all
	c.qmu.Unlock()
	for _, q := range qs {
		q.fail(cause)
	}
}

// failure returns the error that ended the association.
func (c *Controller) failure() error {
	<-c.dead
	return c.failErr
}

// Err returns nil while the association is up, else the *ConnectionError
// that ended it.
func (c *Controller) Err() error {
	select {
	case <-c.dead:
		return c.failErr
	default:
		return nil
	}
}

// Done is closed when the association has ended (failure or Close).
func (c *Controller) Done() <-chan struct{} { return c.dead }

// Close ends the association at once: connections are closed without a
// shutdown notification, commands in flight fail with a *ConnectionError
// wrapping ErrClosed, and Close waits for the package's goroutines. It must
// not be called from an IO.Done callback. Close is idempotent.
func (c *Controller) Close() error {
	c.closing.Do(func() {
		c.fail(ErrClosed)
		c.qmu.Lock()
		qs := c.qmu.all
		c.qmu.Unlock()
		for _, q := range qs {
			<-q.receiveDone
		}
		c.bg.Wait()
	})
	return c.closeErr
}

// Shutdown performs a normal shutdown like `nvme disconnect`: CC.SHN = 01b,
// wait for CSTS.SHST = 10b (bounded by ctx and by RTD3E, clamped to
// 5..60 s), then Close. Commands still in flight when Shutdown closes the
// connections fail; callers should quiesce I/O first.
func (c *Controller) Shutdown(ctx context.Context) error {
	err := c.shutdownNotify(ctx)
	c.Close()
	return err
}

// CNTLID returns the controller ID returned by the admin Connect.
func (c *Controller) CNTLID() uint16 { return c.cntlid }

// Identify returns the Identify Controller data read during Dial.
func (c *Controller) Identify() nvme.IdentifyController { return c.id }

// CAP and VS return the properties read during Dial.
func (c *Controller) CAP() uint64 { return c.cap }

// VS returns the Version property read during Dial.
func (c *Controller) VS() uint32 { return c.vs }

// IOQueueCount returns the number of connected I/O queues.
func (c *Controller) IOQueueCount() int { return len(c.io) }

// QueueDepth returns the number of command slots of each I/O queue
// (SQSIZE+1), or 0 for a discovery controller.
func (c *Controller) QueueDepth() int {
	if len(c.io) == 0 {
		return 0
	}
	return len(c.io[0].slots)
}

// MaxTransferSize returns the largest Read/Write data length in bytes (from
// MDTS), or 0 if the controller sets no limit.
func (c *Controller) MaxTransferSize() int { return c.maxTransfer }

// InlineDataSize returns the largest write sent in the command capsule on
// I/O queues (IOCCSZ*16 - 64); larger writes wait for R2T.
func (c *Controller) InlineDataSize() int { return c.ioInlineMax }

// acquireIO takes a command slot on an I/O queue: the first queue with a
// free slot, searching round robin, so that as long as no more commands are
// in flight than the queues hold together it never waits (an IO.Done
// callback that resubmits cannot deadlock). When every queue is full it
// calls beforeWait (if not nil) and waits on the next queue in turn.
func (c *Controller) acquireIO(ctx context.Context, beforeWait func()) (*queue, *slot, error) {
	n := len(c.io)
	if n == 0 {
		if c.discovery {
			return nil, nil, fmt.Errorf("%w: a discovery controller has no I/O queues", ErrInvalidArgument)
		}
		if err := c.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%w: no I/O queues", ErrInvalidArgument)
	}
	start := 0
	if n > 1 {
		start = int(c.next.Add(1)-1) % n
	}
	for i := 0; i < n; i++ {
		q := c.io[(start+i)%n]
		select {
		case idx := <-q.free:
			return q, &q.slots[idx], nil
		default:
		}
	}
	if beforeWait != nil {
		beforeWait()
	}
	q := c.io[start]
	s, err := q.acquire(ctx)
	return q, s, err
}
