// Package clustertest is an in-process stand-in for the replication layer,
// for the tests of pkg/cluster and pkg/api: Raft groups whose leaders the
// test chooses, a metadata log applied synchronously to every node's
// machine, and volumes that copy each write to every member's replica.
package clustertest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"basalt/pkg/backend"
	"basalt/pkg/cluster"
)

// Net is a set of fake nodes sharing fake Raft groups.
type Net struct {
	mu       sync.Mutex
	meta     *group
	machines map[cluster.NodeID]*cluster.Machine
	entries  [][]byte
	vols     map[cluster.GroupID]*group
	// lose is the number of coming proposals that commit but report a
	// lost leader (their outcome unknown to the proposer).
	lose int
	// progress: volume leaders report their members caught up
	// (ReportProgress); transfers counts the leadership transfers.
	progress  bool
	transfers int
}

// group is one fake Raft group, shared by its members.
type group struct {
	id       cluster.GroupID
	leader   cluster.NodeID
	members  []cluster.NodeID
	locals   map[cluster.NodeID]backend.Backend
	watchers map[cluster.NodeID][]chan cluster.NodeID
	stopped  map[cluster.NodeID]bool   // StopGroup
	failed   map[cluster.NodeID]string // FailGroup: why
	snaps    []string                  // snapshot.go
}

// NewNet returns an empty Net; the metadata leader is the first node that
// starts its metadata group, unless SetMetadataLeader says otherwise.
func NewNet() *Net {
	return &Net{
		meta:     &group{watchers: map[cluster.NodeID][]chan cluster.NodeID{}},
		machines: map[cluster.NodeID]*cluster.Machine{}, vols: map[cluster.GroupID]*group{},
	}
}

// Replicator returns node self's Replicator.
func (n *Net) Replicator(self cluster.NodeID) cluster.Replicator {
	return &replicator{n: n, self: self}
}

// SetMetadataLeader moves the metadata leadership (0: no leader).
func (n *Net) SetMetadataLeader(id cluster.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.meta.setLeader(id)
}

// SetVolumeLeader moves the leadership of volume group id.
func (n *Net) SetVolumeLeader(id cluster.GroupID, leader cluster.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if g := n.vols[id]; g != nil {
		g.setLeader(leader)
	}
}

// StopGroup makes volume group id stop on node self, as a storage error
// stops a Raft group there: self's watch channels close and it no longer
// counts itself the leader.
func (n *Net) StopGroup(id cluster.GroupID, self cluster.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.vols[id]
	if g == nil {
		return
	}
	for _, ch := range g.watchers[self] {
		close(ch)
	}
	delete(g.watchers, self)
	if g.stopped == nil {
		g.stopped = map[cluster.NodeID]bool{}
	}
	g.stopped[self] = true
}

// FailGroup is StopGroup by a failure: self's Status then reports the
// group failed (fenced) with reason, as a replication.Group that failed.
func (n *Net) FailGroup(id cluster.GroupID, self cluster.NodeID, reason string) {
	n.StopGroup(id, self)
	n.mu.Lock()
	defer n.mu.Unlock()
	if g := n.vols[id]; g != nil {
		if g.failed == nil {
			g.failed = map[cluster.NodeID]string{}
		}
		g.failed[self] = reason
	}
}

// LoseNextProposals makes the next n proposals commit and apply but fail
// as if the leader had been lost while they were in flight.
func (n *Net) LoseNextProposals(k int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lose = k
}

// ReportProgress makes the leader of each volume group report, in its
// Status, every member that has the group open as recently active and
// caught up (on: what a healthy Raft group shows), or report no progress
// at all (off, the default: the leader balance then never transfers).
func (n *Net) ReportProgress(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.progress = on
}

// Transfers returns the number of leadership transfers made so far.
func (n *Net) Transfers() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.transfers
}

// VolumeLeader returns the leader of volume group id (0: none or unknown).
func (n *Net) VolumeLeader(id cluster.GroupID) cluster.NodeID {
	n.mu.Lock()
	defer n.mu.Unlock()
	if g := n.vols[id]; g != nil {
		return g.leader
	}
	return 0
}

// Entries returns the number of metadata entries committed.
func (n *Net) Entries() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.entries)
}

func (g *group) setLeader(id cluster.NodeID) {
	if g.leader == id {
		return
	}
	g.leader = id
	for _, chs := range g.watchers {
		for _, ch := range chs {
			select {
			case ch <- id:
			default: // a slow watcher reads the current leader later
			}
		}
	}
}

type replicator struct {
	n    *Net
	self cluster.NodeID
}

// StartMetadata implements cluster.Replicator. The node's machine catches
// up with the entries committed so far.
func (r *replicator) StartMetadata(members []cluster.NodeID, m *cluster.Machine) (cluster.Group, error) {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	r.n.machines[r.self] = m
	r.n.meta.members = members
	for i, e := range r.n.entries {
		if err := m.Apply(context.Background(), uint64(i+1), e); err != nil {
			return nil, err
		}
	}
	if r.n.meta.leader == 0 {
		r.n.meta.setLeader(r.self)
	}
	return &handle{n: r.n, g: r.n.meta, self: r.self}, nil
}

// OpenVolume implements cluster.Replicator.
func (r *replicator) OpenVolume(id cluster.GroupID, members []cluster.NodeID, local backend.Backend) (cluster.Group, backend.Backend, error) {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	g := r.n.vols[id]
	if g == nil {
		g = &group{id: id, members: members, locals: map[cluster.NodeID]backend.Backend{},
			watchers: map[cluster.NodeID][]chan cluster.NodeID{}}
		r.n.vols[id] = g
	}
	if _, ok := g.locals[r.self]; ok {
		return nil, nil, fmt.Errorf("clustertest: group %d already open on %v", id, r.self)
	}
	g.locals[r.self] = local
	if g.leader == 0 {
		g.setLeader(r.self)
	}
	h := &handle{n: r.n, g: g, self: r.self}
	return h, &volume{Backend: local, h: h}, nil
}

// CloseVolume implements cluster.Replicator.
func (r *replicator) CloseVolume(id cluster.GroupID, _ bool) error {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	g := r.n.vols[id]
	if g == nil {
		return nil
	}
	delete(g.locals, r.self)
	for _, ch := range g.watchers[r.self] {
		close(ch)
	}
	delete(g.watchers, r.self)
	if g.leader == r.self {
		g.leader = 0
		for _, m := range g.members {
			if _, ok := g.locals[m]; ok {
				g.setLeader(m)
				break
			}
		}
	}
	if len(g.locals) == 0 {
		delete(r.n.vols, id)
	}
	return nil
}

// DropDormant implements cluster.Replicator: the fake keeps no logs.
func (r *replicator) DropDormant(func(cluster.GroupID) bool) error { return nil }

// handle is one node's view of a group.
type handle struct {
	n    *Net
	g    *group
	self cluster.NodeID
}

func (h *handle) Propose(ctx context.Context, data []byte) error {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	if h.g != h.n.meta {
		return fmt.Errorf("clustertest: proposals go to the metadata group only")
	}
	if h.g.leader != h.self {
		return fmt.Errorf("clustertest: %w", cluster.ErrNotLeader)
	}
	h.n.entries = append(h.n.entries, slices.Clone(data))
	idx := uint64(len(h.n.entries))
	ids := make([]cluster.NodeID, 0, len(h.n.machines))
	for id := range h.n.machines {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := h.n.machines[id].Apply(ctx, idx, data); err != nil {
			return err
		}
	}
	if h.n.lose > 0 {
		h.n.lose--
		return fmt.Errorf("clustertest: leadership lost in flight: %w", cluster.ErrNoLeader)
	}
	return nil
}

func (h *handle) ReadBarrier(ctx context.Context) error {
	if h.Leader() == 0 {
		return cluster.ErrNoLeader
	}
	return nil
}

func (h *handle) Leader() cluster.NodeID {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.g.leader
}

func (h *handle) IsLeader() bool {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.g.leader == h.self && !h.g.stopped[h.self]
}

func (h *handle) Watch() <-chan cluster.NodeID {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	ch := make(chan cluster.NodeID, 16)
	h.g.watchers[h.self] = append(h.g.watchers[h.self], ch)
	return ch
}

func (h *handle) Status() cluster.GroupStatus {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	role := "follower"
	if h.g.leader == h.self {
		role = "leader"
	}
	st := cluster.GroupStatus{Leader: h.g.leader, Role: role, Term: 1}
	if reason, ok := h.g.failed[h.self]; ok {
		st.Err, st.Failed, st.Role = reason, true, "follower"
	}
	if h.g == h.n.meta {
		st.Commit, st.Applied = uint64(len(h.n.entries)), uint64(len(h.n.entries))
	}
	if h.n.progress && h.g != h.n.meta && role == "leader" && !st.Failed {
		st.LastIndex = 1
		st.Progress, st.RecentActive = map[cluster.NodeID]uint64{}, map[cluster.NodeID]bool{}
		for _, m := range h.g.members {
			if _, ok := h.g.locals[m]; ok {
				st.Progress[m], st.RecentActive[m] = 1, true
			}
		}
	}
	return st
}

// TransferLeadership moves the leadership to node to at once when this
// node leads the group and to has it open.
func (h *handle) TransferLeadership(to cluster.NodeID) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	if h.g.leader != h.self || h.g.stopped[h.self] || !slices.Contains(h.g.members, to) {
		return
	}
	if _, ok := h.g.locals[to]; !ok && h.g != h.n.meta {
		return
	}
	h.n.transfers++
	h.g.setLeader(to)
}

// volume is a replicated backend: the leader writes every member's
// replica; other nodes answer backend.ErrInaccessible.
type volume struct {
	backend.Backend
	h      *handle
	limits qosLimits // qos.go
}

func (v *volume) leaderLocals() ([]backend.Backend, error) {
	v.h.n.mu.Lock()
	defer v.h.n.mu.Unlock()
	if v.h.g.leader != v.h.self {
		return nil, backend.ErrInaccessible
	}
	var out []backend.Backend
	for _, m := range v.h.g.members {
		if b, ok := v.h.g.locals[m]; ok {
			out = append(out, b)
		}
	}
	return out, nil
}

func (v *volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	if _, err := v.leaderLocals(); err != nil {
		return err
	}
	return v.Backend.ReadAt(ctx, p, off)
}

func (v *volume) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	return v.each(func(b backend.Backend) error { return b.WriteAt(ctx, p, off, f) })
}

func (v *volume) Trim(ctx context.Context, off, n int64) error {
	return v.each(func(b backend.Backend) error { return b.Trim(ctx, off, n) })
}

func (v *volume) WriteZeroes(ctx context.Context, off, n int64) error {
	return v.each(func(b backend.Backend) error { return b.WriteZeroes(ctx, off, n) })
}

func (v *volume) each(fn func(backend.Backend) error) error {
	locals, err := v.leaderLocals()
	if err != nil {
		return err
	}
	for _, b := range locals {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// Grow implements the cluster's grower: bounds come from the local
// replica, which the reconciler grew first.
func (v *volume) Grow(int64) error { return nil }

// Size is the local replica's.
func (v *volume) Size() int64 { return v.Backend.Size() }

// Close does not close the local replica (the reconciler owns it).
func (v *volume) Close() error { return nil }
