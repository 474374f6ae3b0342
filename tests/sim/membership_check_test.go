package sim

import (
	"fmt"
	"slices"
	"strings"

	"basalt/replication"
)

// The checks of the membership changes, besides the workload's own (every
// read returns what the model allows; at most one leader per term):
//
//   - Committed configurations are never lost: the configuration that the
//     group's established leader applied (below) changes only to one that a
//     change proposed since leads to, or from a joint configuration to the
//     one it leaves to.
//   - Sweeps: after every recovery (a node's restart) and every phase of a
//     membership operation, a read of the whole volume through the
//     established leader must return every acknowledged write (or a value
//     the model allows), and so must the store replica of every member, read
//     once the member has applied the leader's commit index, whatever the
//     configuration became.
//
// The established leader of a group is a node that leads it in the highest
// term any node was seen in, and has applied its log up to where it stood
// when first seen leading: its own term's first entry, so it has applied
// every entry committed before its term, and its commit index covers every
// acknowledged write.

// noteTerms records the highest term any up node of group g is in, and,
// for a leader first seen in its term, its last index.
func (s *sim) noteTerms(g int) {
	m := &s.mem[g]
	for _, n := range s.membersOf(g) {
		st := n.vols[g].Group().Status()
		m.maxTerm = max(m.maxTerm, st.Term)
		if _, seen := m.termStart[st.Term]; st.Role == replication.RoleLeader && !seen {
			m.termStart[st.Term] = st.LastIndex
		}
	}
}

// establishedLeader returns group g's established leader and its status, or
// nil.
func (s *sim) establishedLeader(g int) (*simNode, replication.GroupStatus) {
	m := &s.mem[g]
	for _, n := range s.membersOf(g) {
		if n.failing {
			continue
		}
		st := n.vols[g].Group().Status()
		if st.Role == replication.RoleLeader && st.Term == m.maxTerm && st.Applied >= m.termStart[st.Term] && st.Err == nil {
			return n, st
		}
	}
	return nil, replication.GroupStatus{}
}

// observeConf checks the configuration the established leader (st) applied
// against the last one seen committed and the changes proposed since.
func (s *sim) observeConf(g int, st replication.GroupStatus) {
	m := &s.mem[g]
	c := normalize(st.Members)
	// A change proposed in an earlier term that the established leader has
	// not applied can no longer commit: its log holds every committed entry
	// of the earlier terms, and any entry after them is of its term or
	// later.
	live := m.open[:0]
	for _, p := range m.open {
		if p.term >= st.Term {
			live = append(live, p)
		}
	}
	if sameMembership(c, m.conf) {
		m.open = live
		return
	}
	legit := m.conf.Joint() && sameMembership(c, leaveJoint(m.conf))
	for _, p := range m.open {
		legit = legit || sameMembership(c, p.result) || p.result.Joint() && sameMembership(c, leaveJoint(p.result))
	}
	if !legit {
		s.failf("g%d: the configuration went from %v to %v on %v (term %d), which no change proposed since leads to: "+
			"a committed configuration was lost", g+1, m.conf, c, st.Node, st.Term)
		return
	}
	s.stats.membership.configs++
	s.tracef("g%d: configuration %v committed (leader %v, term %d)", g+1, c, st.Node, st.Term)
	m.conf = c
	m.open = slices.DeleteFunc(live, func(p proposedChange) bool {
		return sameMembership(c, p.result) || sameMembership(c, leaveJoint(p.result))
	})
}

// recovered notes that a node restarted: every group is swept again.
func (s *sim) recovered() {
	for g := range groupCount {
		s.mem[g].sweepDue = true
	}
}

// checksDue runs group g's sweep when one is due, and checks the replicas
// of the members waiting for it that have caught up.
func (s *sim) checksDue(g int, l *simNode, st replication.GroupStatus) {
	m := &s.mem[g]
	if m.sweepDue && !slices.ContainsFunc(s.sweeps, func(w *sweep) bool { return w.g == g }) {
		m.sweepDue = false
		s.startSweep(g, l)
		for _, n := range s.membersOf(g) {
			m.checkDue[n.id] = true
		}
	}
	for _, n := range s.membersOf(g) {
		if !m.checkDue[n.id] || n.failing || n.vols[g].Group().Status().Applied < st.Commit {
			continue
		}
		delete(m.checkDue, n.id)
		s.checkReplicaNow(g, n)
	}
}

// allowedNow is what block blk of volume g may hold now: what the model
// allows, and what the writes and trims in flight to it write.
func (s *sim) allowedNow(g int, blk int64) []uint64 {
	allowed := slices.Clone(s.model[g][blk].possible)
	for _, op := range s.inflight {
		if op.group == g && !op.read && blk >= op.first && blk < op.first+op.count {
			allowed = append(allowed, op.id)
		}
	}
	return allowed
}

// checkReplicaNow checks node n's store replica of volume g, which has
// applied the established leader's commit index, against the model.
func (s *sim) checkReplicaNow(g int, n *simNode) {
	got, err := n.readReplica(g)
	if err != nil {
		s.failf("%v", err)
		return
	}
	s.stats.membership.replicaChecks++
	for blk := int64(0); blk < volumeBlocks; blk++ {
		id, err := decodeBlock(got[blk*blockSize:(blk+1)*blockSize], blk)
		if err != nil {
			s.failf("g%d: the caught-up replica on %v: %v", g+1, n.id, err)
			return
		}
		if allowed := s.allowedNow(g, blk); !slices.Contains(allowed, id) {
			s.failf("g%d block %d: the caught-up replica on %v (configuration %v) holds write #%d; the model allows %v "+
				"(a lost or stale write)", g+1, blk, n.id, s.mem[g].conf, id, allowed)
			return
		}
	}
	s.tracef("g%d: the replica on %v matches the model", g+1, n.id)
}

// sweep is a read of a whole volume through its leader, concurrent with
// the workload's operations: each block must hold what the model allowed
// when it started, or what a write or trim issued since wrote.
type sweep struct {
	node    *simNode
	g       int
	buf     []byte
	allowed [][]uint64
	lastID  uint64   // the last write ID issued when it started
	trims   []uint64 // each block's trims issued when it started
}

func (s *sim) startSweep(g int, l *simNode) {
	w := &sweep{node: l, g: g, buf: make([]byte, volumeSize), lastID: s.nextWriteID}
	for blk := range int64(volumeBlocks) {
		w.allowed = append(w.allowed, s.allowedNow(g, blk))
		w.trims = append(w.trims, s.model[g][blk].trims)
	}
	s.sweeps = append(s.sweeps, w)
	s.stats.membership.sweeps++
	s.tracef("g%d: sweep through %v", g+1, l.id)
	l.vols[g].ReadAtAsync(w.buf, 0, func(err error) { s.endSweep(w, err) })
}

func (s *sim) endSweep(w *sweep, err error) {
	if !slices.Contains(s.sweeps, w) {
		return // its node crashed or left
	}
	s.sweeps = slices.DeleteFunc(s.sweeps, func(o *sweep) bool { return o == w })
	if err != nil {
		s.stats.membership.sweepErrors++
		s.mem[w.g].sweepDue = true
		s.tracef("g%d: sweep through %v failed: %v", w.g+1, w.node.id, err)
		return
	}
	for blk := range int64(volumeBlocks) {
		id, err := decodeBlock(w.buf[blk*blockSize:(blk+1)*blockSize], blk)
		if err != nil {
			s.failf("g%d: sweep through %v: %v", w.g+1, w.node.id, err)
			return
		}
		later := id > w.lastID || id == 0 && s.model[w.g][blk].trims > w.trims[blk]
		if !later && !slices.Contains(w.allowed[blk], id) {
			s.failf("g%d block %d: the sweep through %v (configuration %v) read write #%d; the model allowed %v "+
				"(a lost or stale write)", w.g+1, blk, w.node.id, s.mem[w.g].conf, id, w.allowed[blk])
			return
		}
	}
	s.tracef("g%d: sweep through %v ok", w.g+1, w.node.id)
}

// describeGroups is each replica's view of its group, for a failure.
func (s *sim) describeGroups() string {
	var parts []string
	for g := range groupCount {
		for _, n := range s.membersOf(g) {
			st := n.vols[g].Group().Status()
			parts = append(parts, fmt.Sprintf("g%d on %v: %s term %d leader %v commit %d applied %d last %d members %v err %v",
				g+1, n.id, st.Role, st.Term, st.Leader, st.Commit, st.Applied, st.LastIndex, st.Members, st.Err))
			for _, p := range st.Peers {
				parts = append(parts, fmt.Sprintf("  peer %v: match %d next %d %s active %v", p.Node, p.Match, p.Next,
					p.State, p.RecentActive))
			}
		}
		if op := s.mem[g].op; op != nil {
			parts = append(parts, fmt.Sprintf("g%d: %s at phase %v", g+1, op.kind, op.phases[op.at]))
		}
	}
	return strings.Join(parts, "; ")
}
