package cluster

import (
	"fmt"
	"slices"
)

// Membership commands: they change which nodes hold a volume and what state
// a node is in. A volume's replica set changes in two steps: a command sets
// Want (the healer, a drain, a replace, or an administrator decides it from
// the state), the group's leader changes the Raft configuration toward it
// (members.go), and OpReplicasChanged records each configuration the group
// reached. Replicas therefore always mirrors a configuration the group had,
// and Want is only a goal.
const (
	OpJoinNode        Op = "join_node"        // Node (ID 0): a new node; it gets State.NextNode
	OpSetNodeState    Op = "set_node_state"   // NodeID, State
	OpRemoveNode      Op = "remove_node"      // NodeID
	OpMoveReplicas    Op = "move_replicas"    // Volume, ID, Nodes: set Want
	OpReplicasChanged Op = "replicas_changed" // Volume, ID, Nodes (voters), Learners
	OpReplaceNode     Op = "replace_node"     // NodeID (old), Nodes ([new]): drain old into new
)

// MaxNodeID is the largest node ID a join hands out (the configuration's
// limit, config.MaxNodeID: each node has a controller-ID range of its own).
const MaxNodeID = 64

// validateMembers checks the membership commands' fields.
func (c *Command) validateMembers() error {
	switch c.Op {
	case OpJoinNode:
		if c.Node == nil || c.Node.RaftAddr == "" || c.Node.APIAddr == "" || c.Node.NVMeAddr == "" {
			return fmt.Errorf("%w: join_node needs the node's Raft, API and NVMe addresses", ErrInvalid)
		}
	case OpSetNodeState:
		switch c.State {
		case NodeActive, NodeMaintenance, NodeDraining, NodeOut:
		default:
			return fmt.Errorf("%w: node state %q: want %s, %s, %s or %s", ErrInvalid, c.State,
				NodeActive, NodeMaintenance, NodeDraining, NodeOut)
		}
		if c.NodeID == 0 {
			return fmt.Errorf("%w: %s without a node", ErrInvalid, c.Op)
		}
	case OpReplaceNode:
		if c.NodeID == 0 || len(c.Nodes) != 1 || c.Nodes[0] == c.NodeID {
			return fmt.Errorf("%w: replace_node needs the old node and one other new node", ErrInvalid)
		}
	case OpRemoveNode:
		if c.NodeID == 0 {
			return fmt.Errorf("%w: %s without a node", ErrInvalid, c.Op)
		}
	case OpMoveReplicas, OpReplicasChanged:
		if err := ValidateVolumeName(c.Volume); err != nil {
			return err
		}
		most := MaxReplicationFactor
		if c.Op == OpReplicasChanged {
			// A leader that leaves promotes the new voters before it
			// hands over: the old and the new replicas, for a while.
			most = 2 * MaxReplicationFactor
		}
		if len(c.Nodes) == 0 || len(c.Nodes) > most {
			return fmt.Errorf("%w: %s with %d nodes: want 1..%d", ErrInvalid, c.Op, len(c.Nodes), most)
		}
		if dupIDs(c.Nodes) || dupIDs(c.Learners) {
			return fmt.Errorf("%w: %s names a node twice", ErrInvalid, c.Op)
		}
	default:
		return fmt.Errorf("%w: unknown command %q", ErrInvalid, c.Op)
	}
	return nil
}

func dupIDs(ids []NodeID) bool {
	s := slices.Clone(ids)
	slices.Sort(s)
	return len(slices.Compact(s)) != len(ids)
}

// isMemberOp reports whether op is one of the membership commands.
func isMemberOp(op Op) bool {
	switch op {
	case OpJoinNode, OpSetNodeState, OpRemoveNode, OpMoveReplicas, OpReplicasChanged, OpReplaceNode:
		return true
	}
	return false
}

// applyMembers applies a membership command to s.
func (s *State) applyMembers(c *Command) (Result, error) {
	switch c.Op {
	case OpJoinNode:
		return s.joinNode(c.Node)
	case OpSetNodeState:
		n := s.Nodes[c.NodeID]
		if n == nil {
			return Result{}, fmt.Errorf("%w: %v", ErrNotFound, c.NodeID)
		}
		n.State = c.State
		return Result{Node: clonePtr(n)}, nil
	case OpRemoveNode:
		return s.removeNode(c.NodeID)
	case OpReplaceNode:
		return s.replaceNode(c.NodeID, c.Nodes[0])
	}
	v := s.Volumes[c.Volume]
	if v == nil || v.ID != c.ID {
		return Result{}, fmt.Errorf("%w: volume %q (group %v)", ErrNotFound, c.Volume, c.ID)
	}
	if c.Op == OpMoveReplicas {
		if err := s.checkWant(v, c.Nodes); err != nil {
			return Result{}, err
		}
		v.Want = sortedIDs(c.Nodes)
		if slices.Equal(v.Want, v.Replicas) && len(v.Learners) == 0 {
			v.Want = nil
		}
		return Result{Volume: v.clone()}, nil
	}
	v.Replicas, v.Learners = sortedIDs(c.Nodes), sortedIDs(c.Learners)
	if len(v.Learners) == 0 {
		v.Learners = nil
	}
	if slices.Equal(v.Want, v.Replicas) && len(v.Learners) == 0 {
		v.Want = nil // reached
	}
	return Result{Volume: v.clone()}, nil
}

// checkWant refuses a replica set with nodes that do not exist, or with new
// nodes that do not take replicas.
func (s *State) checkWant(v *Volume, want []NodeID) error {
	for _, id := range want {
		n := s.Nodes[id]
		if n == nil {
			return fmt.Errorf("%w: %v is not a node of the cluster", ErrInvalid, id)
		}
		if !v.HasReplica(id) && !n.Serves() {
			return fmt.Errorf("%w: %v is %s and takes no new replicas", ErrInvalid, id, n.State)
		}
	}
	return nil
}

// registerNode records a node's addresses as it starts. It keeps the
// administrative state a node had (maintenance, draining), except that a
// node marked out because it was down is active again once it is back; its
// replicas were moved away meanwhile, and it receives new ones.
func (s *State) registerNode(req *Node) (Result, error) {
	n := *req
	n.State = NodeActive
	if old := s.Nodes[n.ID]; old != nil && old.State != NodeOut && old.State != "" {
		n.State = old.State
	}
	if old := s.Nodes[n.ID]; old != nil && n.Capacity == 0 {
		n.Capacity = old.Capacity
	}
	s.Nodes[n.ID] = &n
	return Result{Node: clonePtr(&n)}, nil
}

// joinNode adds a node under the next free ID.
func (s *State) joinNode(req *Node) (Result, error) {
	for _, n := range s.Nodes {
		if n.RaftAddr == req.RaftAddr || n.APIAddr == req.APIAddr {
			return Result{}, fmt.Errorf("%w: %v already uses address %s or %s", ErrExists, n.ID, req.RaftAddr, req.APIAddr)
		}
	}
	id := s.NextNode
	for _, n := range s.Nodes {
		id = max(id, n.ID+1)
	}
	for _, r := range s.Removed {
		id = max(id, r+1)
	}
	if id == 0 {
		id = 1
	}
	if id > MaxNodeID {
		return Result{}, fmt.Errorf("%w: node IDs go up to %d and the next free one is %d", ErrNoCapacity, MaxNodeID, id)
	}
	n := *req
	n.ID, n.State = id, NodeActive
	s.Nodes[id] = &n
	s.NextNode = id + 1
	return Result{Node: clonePtr(&n)}, nil
}

// replaceNode drains old into new: every volume with a replica on old is
// to move it to new (or, where new already holds one, to a node placement
// chooses, which the healer sets), and old is draining from now on.
func (s *State) replaceNode(old, new NodeID) (Result, error) {
	o, n := s.Nodes[old], s.Nodes[new]
	switch {
	case o == nil:
		return Result{}, fmt.Errorf("%w: %v", ErrNotFound, old)
	case n == nil:
		return Result{}, fmt.Errorf("%w: %v", ErrNotFound, new)
	case !n.Serves():
		return Result{}, fmt.Errorf("%w: %v is %s and takes no new replicas", ErrInvalid, new, n.State)
	}
	o.State = NodeDraining
	for _, v := range s.Volumes {
		if !v.IsVoter(old) || v.HasReplica(new) {
			continue
		}
		base := v.Want
		if len(base) == 0 {
			base = v.Replicas
		}
		if !slices.Contains(base, old) {
			continue // already moving off old
		}
		want := slices.DeleteFunc(slices.Clone(base), func(id NodeID) bool { return id == old })
		v.Want = sortedIDs(append(want, new))
	}
	return Result{Node: clonePtr(o)}, nil
}

// removeNode forgets a node that holds no replica.
func (s *State) removeNode(id NodeID) (Result, error) {
	if s.Nodes[id] == nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotFound, id)
	}
	var held []string
	for _, v := range s.VolumeList() {
		if v.HasReplica(id) {
			held = append(held, v.Name)
		}
	}
	if len(held) > 0 {
		return Result{}, fmt.Errorf("%w: %v still holds replicas of %v: drain it first", ErrInvalid, id, held)
	}
	delete(s.Nodes, id)
	s.NextNode = max(s.NextNode, id+1) // IDs are never reused
	if !slices.Contains(s.Removed, id) {
		s.Removed = append(s.Removed, id)
	}
	return Result{}, nil
}

func sortedIDs(ids []NodeID) []NodeID {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

func clonePtr[T any](p *T) *T {
	c := *p
	return &c
}
