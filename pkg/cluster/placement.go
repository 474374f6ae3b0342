package cluster

import (
	"fmt"
	"slices"
	"strings"
)

// Placement chooses the nodes of a new replica set (create) and of each
// replacement (healing, drain) from the state alone, so that every node
// computes the same answer. Candidates are the nodes that serve (active).
// Among them the order is: a zone no chosen replica is in (zones are failure
// domains; a node without a zone is a zone of its own), then the most free
// capacity (Capacity less the sizes of the volumes it holds or is to hold:
// volumes are thin, so this ranks nodes and refuses none), then the fewest
// replicas,
// then a rotation by group ID so that equal nodes share the work.

// nodeLoad is what placement knows of a node.
type nodeLoad struct {
	n        *Node
	replicas int
	used     int64
}

func (l nodeLoad) free() int64 { return l.n.Capacity - l.used }

func (l nodeLoad) zone() string {
	if l.n.Zone == "" {
		return fmt.Sprintf("\x00%d", l.n.ID) // alone in its zone
	}
	return l.n.Zone
}

func (s *State) loads() map[NodeID]*nodeLoad {
	out := make(map[NodeID]*nodeLoad, len(s.Nodes))
	for id, n := range s.Nodes {
		out[id] = &nodeLoad{n: n}
	}
	for _, v := range s.Volumes {
		size := max(v.Size, v.PendingSize)
		for _, id := range v.holders() {
			if l := out[id]; l != nil {
				l.replicas++
				l.used += size
			}
		}
	}
	return out
}

// holders returns every node that holds or is to hold a replica of v.
func (v *Volume) holders() []NodeID {
	out := slices.Clone(v.Replicas)
	for _, id := range append(slices.Clone(v.Learners), v.Want...) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// pick chooses n more nodes for the volume of group id, beside
// chosen and never among exclude. It says why when it cannot.
func (s *State) pick(n int, id GroupID, chosen, exclude []NodeID) ([]NodeID, error) {
	loads := s.loads()
	var cands []*nodeLoad
	skipped := map[string]int{}
	for _, nd := range s.NodeList() {
		l := loads[nd.ID]
		switch {
		case slices.Contains(chosen, nd.ID) || slices.Contains(exclude, nd.ID):
		case !nd.Serves():
			skipped[nd.State]++
		default:
			cands = append(cands, l)
		}
	}
	if len(cands) > 0 {
		rot := int(uint64(id) % uint64(len(cands)))
		cands = append(cands[rot:], cands[:rot]...)
	}
	out := slices.Clone(chosen)
	for range n {
		zones := map[string]bool{}
		for _, c := range out {
			if l := loads[c]; l != nil {
				zones[l.zone()] = true
			}
		}
		best := -1
		for i, c := range cands {
			if c == nil {
				continue
			}
			if best < 0 || better(c, cands[best], zones) {
				best = i
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("%w: %d more node(s) needed for volume group %v, none left (%s)",
				ErrNoCapacity, n-(len(out)-len(chosen)), id, describeSkipped(skipped))
		}
		out = append(out, cands[best].n.ID)
		cands[best] = nil
	}
	return out[len(chosen):], nil
}

// better reports whether a is a better home than b for the next replica
// of a volume whose replicas are in zones.
func better(a, b *nodeLoad, zones map[string]bool) bool {
	if na, nb := !zones[a.zone()], !zones[b.zone()]; na != nb {
		return na
	}
	if a.n.Capacity > 0 && b.n.Capacity > 0 && a.free() != b.free() {
		return a.free() > b.free()
	}
	return a.replicas < b.replicas
}

func describeSkipped(skipped map[string]int) string {
	if len(skipped) == 0 {
		return "no other node"
	}
	var parts []string
	for _, k := range []string{NodeMaintenance, NodeDraining, NodeOut} {
		if skipped[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", skipped[k], k))
		}
	}
	return "other nodes: " + strings.Join(parts, ", ")
}

// wantFor returns the replica set v should move to so that every replica is
// on a node that holds replicas (active or in maintenance), or nil when it
// already is, or an error saying why no node can take a replacement. A
// replica on a node that is out, draining or gone is replaced.
func (s *State) wantFor(v *Volume) ([]NodeID, error) {
	var keep, lost []NodeID
	for _, id := range v.Replicas {
		n := s.Nodes[id]
		if n != nil && (n.Serves() || n.State == NodeMaintenance) {
			keep = append(keep, id)
		} else {
			lost = append(lost, id)
		}
	}
	if len(lost) == 0 {
		return nil, nil
	}
	add, err := s.pick(len(lost), v.ID, keep, v.Replicas)
	if err != nil {
		return nil, err
	}
	return sortedIDs(append(keep, add...)), nil
}

// wantHealthy reports whether every node of v.Want can hold a replica.
func (s *State) wantHealthy(v *Volume) bool {
	for _, id := range v.Want {
		n := s.Nodes[id]
		if n == nil || !(n.Serves() || n.State == NodeMaintenance && v.IsVoter(id)) {
			return false
		}
	}
	return true
}
