package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"basalt/pkg/cluster"
)

// Node lifecycle routes (doc.go, "Nodes"): each is one metadata command;
// the moves they start are carried out by the volumes' leaders and the
// healer, and GET /v1/nodes and /v1/volumes show their progress.
func (s *Server) nodeRoutes() {
	s.route("/v1/nodes/{id}", map[string]handler{"DELETE": s.removeNode})
	s.route("/v1/nodes/{id}/drain", map[string]handler{"POST": s.nodeState(cluster.NodeDraining)})
	s.route("/v1/nodes/{id}/maintenance", map[string]handler{"POST": s.nodeState(cluster.NodeMaintenance)})
	s.route("/v1/nodes/{id}/activate", map[string]handler{"POST": s.nodeState(cluster.NodeActive)})
	s.route("/v1/nodes/{id}/replace", map[string]handler{"POST": s.replaceNode})
	s.route("/v1/nodes/join", map[string]handler{"POST": s.joinNode})
}

// ReplaceNodeRequest is the body of POST /v1/nodes/{id}/replace.
type ReplaceNodeRequest struct {
	// With is the node that takes the replicas.
	With cluster.NodeID `json:"with"`
}

// JoinRequest is the body of POST /v1/nodes/join: a new node's addresses.
type JoinRequest struct {
	Name     string `json:"name"`
	NVMeAddr string `json:"nvme_addr"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	Zone     string `json:"zone,omitempty"`
	Capacity int64  `json:"capacity,omitempty"`
	// CSR is the new node's certificate request (PEM, pkg/pki
	// NewKeyAndCSR); required by a node with Config.Security, which
	// answers the certificate (join_cert.go).
	CSR string `json:"csr,omitempty"`
}

// JoinView answers a join: the ID the node got and the members it joins.
type JoinView struct {
	Node cluster.Node `json:"node"`
	// ClusterID is the cluster's UUID, which the new node stamps into its
	// state.
	ClusterID string `json:"cluster_id"`
	// Nodes are the cluster's nodes, the new one included.
	Nodes []cluster.Node `json:"nodes"`
	// MetadataVoters are the metadata group's voters: the peers the new
	// node hears from until it has the group's configuration.
	MetadataVoters []cluster.NodeID `json:"metadata_voters"`
	// Certificate is the new node's certificate (PEM), signed by the
	// cluster CA for its ID; CACertificate is that CA's (PEM). Both are
	// empty from a node without Config.Security.
	Certificate   string `json:"certificate,omitempty"`
	CACertificate string `json:"ca_certificate,omitempty"`
	// Tokens is the answering node's tokens file (pkg/auth), which the
	// new node takes as its own if it has none.
	Tokens json.RawMessage `json:"tokens,omitempty"`
}

func pathNode(r *http.Request) (cluster.NodeID, error) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: node %q: want a node ID (basaltctl node list shows them)", cluster.ErrInvalid, r.PathValue("id"))
	}
	return cluster.NodeID(id), nil
}

func (s *Server) nodeState(state string) handler {
	return func(r *http.Request) (int, any, error) {
		id, err := pathNode(r)
		if err != nil {
			return 0, nil, err
		}
		res, err := s.submit(r, cluster.Command{Op: cluster.OpSetNodeState, NodeID: id, State: state})
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, res.Node, nil
	}
}

func (s *Server) replaceNode(r *http.Request) (int, any, error) {
	id, err := pathNode(r)
	if err != nil {
		return 0, nil, err
	}
	var req ReplaceNodeRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpReplaceNode, NodeID: id, Nodes: []cluster.NodeID{req.With}})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, res.Node, nil
}

func (s *Server) removeNode(r *http.Request) (int, any, error) {
	id, err := pathNode(r)
	if err != nil {
		return 0, nil, err
	}
	if _, err := s.submit(r, cluster.Command{Op: cluster.OpRemoveNode, NodeID: id}); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func (s *Server) joinNode(r *http.Request) (int, any, error) {
	var req JoinRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	if err := s.checkJoinCSR(req); err != nil { // before the join takes an ID
		return 0, nil, err
	}
	n := &cluster.Node{Name: req.Name, NVMeAddr: req.NVMeAddr, RaftAddr: req.RaftAddr, APIAddr: req.APIAddr,
		Zone: req.Zone, Capacity: req.Capacity}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpJoinNode, Node: n})
	if err != nil {
		return 0, nil, err
	}
	// The command may have been applied on the leader only yet: the new
	// node is listed whatever this node has applied.
	jv := JoinView{Node: *res.Node, Nodes: s.c.Nodes()}
	if !slices.ContainsFunc(jv.Nodes, func(n cluster.Node) bool { return n.ID == res.Node.ID }) {
		jv.Nodes = append(jv.Nodes, *res.Node)
	}
	if s.cfg.ClusterID != nil {
		jv.ClusterID = s.cfg.ClusterID()
	}
	if mg, ok := s.c.MetadataGroup().(cluster.MemberGroup); ok {
		jv.MetadataVoters = mg.Members().Voters
	}
	if err := s.signJoin(req, &jv); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, jv, nil
}
