package api

import (
	"context"
	"fmt"

	"basalt/pkg/cluster"
)

// SetNodeState sets a node's administrative state (drain, maintenance,
// activate): POST /v1/nodes/{id}/{verb}.
func (c *Client) SetNodeState(ctx context.Context, id cluster.NodeID, state string) (cluster.Node, error) {
	verb := map[string]string{cluster.NodeDraining: "drain", cluster.NodeMaintenance: "maintenance",
		cluster.NodeActive: "activate"}[state]
	if verb == "" {
		return cluster.Node{}, fmt.Errorf("%w: node state %q cannot be set", cluster.ErrInvalid, state)
	}
	var n cluster.Node
	return n, c.do(ctx, "POST", fmt.Sprintf("/v1/nodes/%d/%s", id, verb), nil, &n)
}

// ReplaceNode drains node old into node with.
func (c *Client) ReplaceNode(ctx context.Context, old, with cluster.NodeID) (cluster.Node, error) {
	var n cluster.Node
	return n, c.do(ctx, "POST", fmt.Sprintf("/v1/nodes/%d/replace", old), ReplaceNodeRequest{With: with}, &n)
}

// RemoveNode removes a node that holds no replica.
func (c *Client) RemoveNode(ctx context.Context, id cluster.NodeID) error {
	return c.do(ctx, "DELETE", fmt.Sprintf("/v1/nodes/%d", id), nil, nil)
}

// JoinNode asks the cluster to admit a new node.
func (c *Client) JoinNode(ctx context.Context, req JoinRequest) (JoinView, error) {
	var v JoinView
	return v, c.do(ctx, "POST", "/v1/nodes/join", req, &v)
}
