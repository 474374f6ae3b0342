package sim

import (
	"bytes"
	"errors"
	"slices"
	"time"

	"basalt/pkg/backend"
	"basalt/replication"
)

// hotBlocks: three operations in four go to the first hotBlocks blocks of
// a volume, so that the stores' segments mix blocks overwritten at once with
// blocks that stay, and the cleaner has live blocks to relocate.
const hotBlocks = 12

// pickBlocks returns a free run of 1 to 3 blocks of volume g, marked busy.
func (s *sim) pickBlocks(g int) (int64, int64, bool) {
	count := int64(1 + s.rand.IntN(3))
	span := volumeBlocks
	if s.rand.IntN(4) != 0 {
		span = hotBlocks
	}
	first := int64(s.rand.IntN(span - int(count) + 1))
	busy := 0
	for _, op := range s.inflight {
		if op.group == g {
			busy++
		}
	}
	if busy >= maxInFlight {
		return 0, 0, false
	}
	for b := first; b < first+count; b++ {
		if s.model[g][b].busy {
			return 0, 0, false
		}
	}
	for b := first; b < first+count; b++ {
		s.model[g][b].busy = true
	}
	return first, count, true
}

func (s *sim) newOp(n *simNode, g int, first, count int64) *simOp {
	s.opSeq++
	op := &simOp{seq: s.opSeq, node: n, group: g, first: first, count: count, issued: s.clock.Now()}
	s.inflight = append(s.inflight, op)
	return op
}

// write writes (or trims) a random run of blocks through a node that
// believes it leads volume g.
func (s *sim) write(g int, trim bool) {
	n := s.leaderOf(g)
	if n == nil {
		return
	}
	first, count, ok := s.pickBlocks(g)
	if !ok {
		return
	}
	op := s.newOp(n, g, first, count)
	done := func(err error) { s.finish(op, err) }
	if trim {
		for b := first; b < first+count; b++ {
			s.model[g][b].trims++
		}
		s.tracef("op %d: %v trims g%d blocks [%d, %d)", op.seq, n.id, g+1, first, first+count)
		n.vols[g].TrimAsync(first*blockSize, count*blockSize, done)
		return
	}
	s.nextWriteID++
	op.id = s.nextWriteID
	op.buf = make([]byte, count*blockSize)
	for b := range count {
		blockData(op.buf[b*blockSize:(b+1)*blockSize], op.id, first+b)
	}
	s.tracef("op %d: %v writes #%d to g%d blocks [%d, %d)", op.seq, n.id, op.id, g+1, first, first+count)
	n.vols[g].WriteAtAsync(op.buf, first*blockSize, 0, done)
}

// read reads a random run of blocks through a node that believes it leads.
func (s *sim) read(g int) {
	n := s.leaderOf(g)
	if n == nil {
		return
	}
	first, count, ok := s.pickBlocks(g)
	if !ok {
		return
	}
	op := s.newOp(n, g, first, count)
	op.read = true
	op.buf = make([]byte, count*blockSize)
	s.tracef("op %d: %v reads g%d blocks [%d, %d)", op.seq, n.id, g+1, first, first+count)
	n.vols[g].ReadAtAsync(op.buf, first*blockSize, func(err error) { s.finish(op, err) })
}

// writeToFollower checks that a node that does not lead refuses I/O with
// the ANA errors, at once.
func (s *sim) writeToFollower(g int) {
	for _, n := range s.upNodes() {
		if n.vols[g] == nil {
			continue
		}
		grp := n.vols[g].Group()
		if grp.IsLeader() {
			continue
		}
		var result error
		called := false
		n.vols[g].WriteAtAsync(make([]byte, blockSize), 0, 0, func(err error) { result, called = err, true })
		switch {
		case !called:
			s.failf("%v: a write on a follower of g%d did not fail at once", n.id, g+1)
		case !errors.Is(result, backend.ErrInaccessible) && !errors.Is(result, backend.ErrTransition):
			s.failf("%v: a write on a follower of g%d returned %v, want an ANA error", n.id, g+1, result)
		}
		return
	}
}

// finish ends an operation: it updates the model for a write, and checks a
// read against it.
func (s *sim) finish(op *simOp, err error) {
	if op.done {
		return
	}
	op.done = true
	s.inflight = slices.DeleteFunc(s.inflight, func(o *simOp) bool { return o == op })
	blocks := s.model[op.group][op.first : op.first+op.count]
	for i := range blocks {
		blocks[i].busy = false
	}
	switch {
	case op.read && err == nil:
		s.stats.reads++
		s.checkRead(op)
	case op.read:
		s.stats.readErrors++
		s.tracef("op %d: read failed: %v", op.seq, err)
	case err == nil:
		s.stats.acked++
		s.tracef("op %d: acknowledged after %v", op.seq, s.clock.Since(op.issued))
		for i := range blocks {
			blocks[i].acknowledged(op.id)
		}
	default:
		s.stats.unknown++
		s.tracef("op %d: outcome unknown: %v", op.seq, err)
		for i := range blocks {
			blocks[i].unknown(op.id)
		}
	}
}

// checkRead checks that every block read holds a value the model allows.
func (s *sim) checkRead(op *simOp) {
	for b := range op.count {
		blk := op.first + b
		id, err := decodeBlock(op.buf[b*blockSize:(b+1)*blockSize], blk)
		if err != nil {
			s.failf("op %d: g%d read on %v: %v", op.seq, op.group+1, op.node.id, err)
			return
		}
		if possible := s.model[op.group][blk].possible; !slices.Contains(possible, id) {
			s.failf("op %d: g%d block %d read on %v holds write #%d; the model allows %v (a lost or stale write)",
				op.seq, op.group+1, blk, op.node.id, id, possible)
			return
		}
	}
	s.tracef("op %d: read ok", op.seq)
}

// blackout cuts every node's power at once, as a power loss of the whole
// cluster does: what survives is what each node's media kept, and every
// acknowledged write must be among it.
func (s *sim) blackout() {
	s.stats.blackouts++
	s.tracef("blackout: every node loses power")
	for _, n := range s.nodes {
		if n.up() {
			s.crash(n, "blackout")
		}
	}
}

// converge heals everything, restarts every node, waits for the operations in
// flight, a leader per volume and one acknowledged write through it, and
// every replica to apply everything; then checks that the replicas are equal
// and hold what the model allows.
func (s *sim) converge() {
	s.net.Heal()
	s.healAt = time.Time{}
	s.net.SetOptions(replication.SimOptions{DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	for _, n := range s.nodes {
		if n.failing {
			s.crash(n, "power loss")
		}
		if !n.up() {
			n.downUntil = s.clock.Now()
		}
	}
	s.waitFor("every node up, no operation in flight, a leader per volume", 30*time.Second, func() bool {
		return len(s.upNodes()) == nodeCount && len(s.inflight) == 0 && s.leaderOf(0) != nil && s.leaderOf(1) != nil
	})
	s.waitFor("the membership changes in progress complete", 30*time.Second, s.membershipSettled)
	for g := range groupCount {
		acked := s.stats.acked
		s.waitFor("a final write acknowledged", 30*time.Second, func() bool {
			if s.stats.acked > acked {
				return true
			}
			if len(s.inflight) == 0 {
				s.write(g, false)
			}
			return false
		})
	}
	s.waitFor("every replica applied the last commit", 30*time.Second, s.replicasCaughtUp)
	if s.failure == nil {
		s.checkReplicas()
	}
}

func (s *sim) waitFor(what string, limit time.Duration, cond func() bool) {
	deadline := s.clock.Now().Add(limit)
	for s.failure == nil && !cond() {
		if !s.clock.Now().Before(deadline) {
			s.failf("liveness: not reached within %v of simulated time: %s (%s)", limit, what, s.describeGroups())
			return
		}
		s.run(10*time.Millisecond, false)
	}
}

func (s *sim) replicasCaughtUp() bool {
	for g := range groupCount {
		l := s.leaderOf(g)
		if l == nil {
			return false
		}
		lead := l.vols[g].Group().Status()
		for _, n := range s.membersOf(g) {
			st := n.vols[g].Group().Status()
			if st.Applied != lead.Commit || st.LastIndex != lead.LastIndex || st.Err != nil {
				return false
			}
		}
	}
	return true
}

// checkReplicas reads every member's replicas from its store, checks each
// against the model (a lost acknowledged write is named as such), and
// compares them byte for byte.
func (s *sim) checkReplicas() {
	for _, n := range s.upNodes() {
		s.tracef("%s", n.storeSummary())
	}
	for g := range groupCount {
		var first []byte
		var firstNode *simNode
		for _, n := range s.membersOf(g) {
			got, err := n.readReplica(g)
			if err != nil {
				s.failf("%v", err)
				return
			}
			if !s.replicaMatchesModel(n, g, got) {
				return
			}
			if first == nil {
				first, firstNode = got, n
			} else if !bytes.Equal(got, first) {
				s.failf("g%d: the replicas on %v and %v differ at block %d", g+1, firstNode.id, n.id,
					firstDifference(got, first)/blockSize)
				return
			}
		}
	}
	s.tracef("replicas equal and consistent with the model")
}

// replicaMatchesModel checks that every block of node n's replica of volume
// g holds what the model allows.
func (s *sim) replicaMatchesModel(n *simNode, g int, replica []byte) bool {
	for blk := int64(0); blk < volumeBlocks; blk++ {
		id, err := decodeBlock(replica[blk*blockSize:(blk+1)*blockSize], blk)
		if err != nil {
			s.failf("g%d: the replica on %v: %v", g+1, n.id, err)
			return false
		}
		if possible := s.model[g][blk].possible; !slices.Contains(possible, id) {
			s.failf("g%d block %d: the replica on %v holds write #%d; the model allows %v (a lost or stale write)",
				g+1, blk, n.id, id, possible)
			return false
		}
	}
	return true
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
