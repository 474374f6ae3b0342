package replication

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
)

// sendSnapshot starts streaming the state machine to a follower that is
// behind the compacted log. Raft's MsgSnap carries only the metadata (the
// applied index, its term and the configuration: logStorage.Snapshot); the
// data come from the state machine, written straight into the transport's
// stream on the transport's goroutine: a delta from the base the receiver
// announced when the state machine can stream one (delta.go), else the
// whole state (StateMachine.Snapshot). The log is not compacted past the
// snapshot's index while it streams, so that the follower can continue from
// the log afterwards. Its progress shows in the leader's status.
func (c *core) sendSnapshot(m raftpb.Message) {
	if m.Snapshot == nil {
		return
	}
	to, index := m.To, m.Snapshot.Metadata.Index
	c.snapshotsOut[to] = index
	progress := c.catchup.startStream(to)
	h, g, sm := c.h, c.g, c.sm
	log := h.log.With("group", g.id, "to", NodeID(to), "index", index)
	log.Info("streaming a snapshot to a follower behind the compacted log")
	body := func(w io.Writer) error {
		base, ok := receiverBase(w)
		pw := &progressWriter{w: w, clock: h.clock, log: log, start: h.clock.Now(), progress: progress}
		if !h.cfg.Manual {
			pw.rate = h.cfg.SnapshotRate
		}
		if ok {
			pw.log = log.With("base", base.Applied)
		}
		delta, err := writeSnapshotBody(sm, pw, base, ok, progress)
		pw.finish(delta, err)
		return err
	}
	h.transport.SendSnapshot(g.id, m, body, func(err error) { g.reportSnapshot(NodeID(to), err) })
}

// finishSnapshot tells Raft how a snapshot stream ended: on failure the
// leader probes the follower again (and sends another snapshot if needed).
func (c *core) finishSnapshot(r snapshotReport) {
	delete(c.snapshotsOut, uint64(r.to))
	c.catchup.endStream(uint64(r.to))
	status := raft.SnapshotFinish
	if r.err != nil {
		status = raft.SnapshotFailure
		c.h.log.Warn("snapshot stream failed", "group", c.g.id, "to", r.to, "err", r.err)
	} else {
		c.stats.snapshotsSent++
	}
	c.rn.ReportSnapshot(uint64(r.to), status)
}

// restore takes a snapshot streamed by the leader. If Raft will install it
// (the same checks as raft.restore), the state machine restores the stream
// first, on the loop, which waits meanwhile: nothing else may be applied
// while the state is replaced. Then m is stepped and the Ready that installs
// the snapshot in the log is handled before restore returns, so that the
// leader hears of it only once it is durable. A snapshot Raft would ignore is
// not read; m is stepped so that Raft answers the leader with its commit
// index.
//
// The sender must be a member (checkStep), and a leader takes no snapshot
// in its own term; hostHandler.HandleSnapshot checked the rest of m.
func (c *core) restore(m raftpb.Message, body io.Reader) error {
	if m.Snapshot == nil {
		return fmt.Errorf("%w: MsgSnap without a snapshot", ErrSnapshotRejected)
	}
	meta := m.Snapshot.Metadata
	if err := c.checkStep(&m); err != nil {
		return err
	}
	// Persist what Raft holds unstable first, so that the log checked below
	// is Raft's whole log.
	if err := c.settle(); err != nil {
		return err
	}
	if bs := c.rn.BasicStatus(); bs.RaftState == raft.StateLeader && m.Term == bs.Term {
		return refused(RejectSnapshot, "MsgSnap of term %d from %v to the leader of that term", m.Term, NodeID(m.From))
	}
	if !c.acceptsSnapshot(m) {
		return c.step(m)
	}
	log := c.h.log.With("group", c.g.id, "from", NodeID(m.From), "index", meta.Index, "term", meta.Term)
	log.Info("restoring a snapshot", "applied", c.applied)
	start := c.h.clock.Now()
	counter := &countingReader{r: body}
	if err := c.sm.Restore(counter, meta.Index); err != nil {
		return fmt.Errorf("%w: restoring %v at %d: %w", ErrSnapshotRejected, c.g.id, meta.Index, err)
	}
	c.restored, c.lastSMIndex = meta.Index, meta.Index
	c.stats.snapshotsReceived++
	if err := c.step(m); err != nil {
		return err
	}
	if err := c.settle(); err != nil {
		return err
	}
	if c.restored != 0 {
		c.fatal = fmt.Errorf("replication: %v: Raft did not install snapshot %d", c.g.id, meta.Index)
		return c.fatal
	}
	elapsed := c.h.clock.Since(start)
	log.Info("snapshot restored", "bytes", counter.n, "elapsed", elapsed, "rate_MBps", rate(counter.n, elapsed))
	return nil
}

// acceptsSnapshot mirrors raft.restore's checks for m, from this node's
// current state.
func (c *core) acceptsSnapshot(m raftpb.Message) bool {
	meta := m.Snapshot.Metadata
	bs := c.rn.BasicStatus()
	switch {
	case m.Term < bs.Term, meta.Index <= bs.Commit:
		return false
	case c.s.matchTerm(meta.Index, meta.Term):
		return false
	}
	cs := meta.ConfState
	return slices.Contains(cs.Voters, c.self) || slices.Contains(cs.Learners, c.self) ||
		slices.Contains(cs.VotersOutgoing, c.self)
}

// progressWriter counts a snapshot's bytes into its streamProgress, which
// the leader's status shows, and logs progress every progressInterval. It
// passes the receiver's base on (SnapshotBaseWriter) and takes the state
// machine's expected size (SnapshotSizer).
type progressWriter struct {
	w        io.Writer
	clock    clock.Clock
	log      *slog.Logger
	start    time.Time
	logged   time.Time
	written  int64
	progress *streamProgress
	// rate, when positive, paces the stream to that many bytes per second
	// (Config.SnapshotRate).
	rate int64
}

var (
	_ SnapshotSizer      = (*progressWriter)(nil)
	_ SnapshotBaseWriter = (*progressWriter)(nil)
)

const progressInterval = 5 * time.Second

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.written += int64(n)
	p.progress.sent.Add(int64(n))
	p.pace()
	since := p.start
	if p.logged.After(since) {
		since = p.logged
	}
	if now := p.clock.Now(); now.Sub(since) >= progressInterval {
		p.logged = now
		p.log.Info("snapshot streaming", "bytes", p.written, "of", p.progress.total.Load(),
			"rate_MBps", rate(p.written, now.Sub(p.start)))
	}
	return n, err
}

// pace waits until the bytes written so far are no more than rate allows
// since the stream started.
func (p *progressWriter) pace() {
	if p.rate <= 0 {
		return
	}
	due := p.start.Add(time.Duration(float64(p.written) / float64(p.rate) * float64(time.Second)))
	if wait := due.Sub(p.clock.Now()); wait > 0 {
		t := p.clock.NewTimer(wait)
		<-t.C()
	}
}

// ExpectBytes implements SnapshotSizer.
func (p *progressWriter) ExpectBytes(n int64) { p.progress.total.Store(n) }

// ReceiverBase implements SnapshotBaseWriter.
func (p *progressWriter) ReceiverBase() (SnapshotBase, bool) { return receiverBase(p.w) }

func (p *progressWriter) finish(delta bool, err error) {
	elapsed := p.clock.Since(p.start)
	if err != nil {
		p.log.Warn("snapshot stream ended early", "bytes", p.written, "delta", delta, "err", err)
		return
	}
	p.log.Info("snapshot streamed", "bytes", p.written, "delta", delta, "elapsed", elapsed,
		"rate_MBps", rate(p.written, elapsed))
}

func rate(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e6
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}
