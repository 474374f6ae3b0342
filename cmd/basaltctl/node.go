package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// nodeCmd mirrors /v1/nodes: list, and the lifecycle verbs, each one
// metadata change; --wait follows the moves a drain or replace starts.
func nodeCmd(o *options) *cobra.Command {
	return group("node", "Nodes of the cluster",
		nodeListCmd(o),
		nodeStateCmd(o, "drain", cluster.NodeDraining,
			"Move every leadership, then every replica, off the node (it can be removed once it holds none)"),
		nodeStateCmd(o, "maintenance", cluster.NodeMaintenance,
			"Keep the node's replicas but move its leaderships away and never mark it out while it is down (a planned reboot)"),
		nodeStateCmd(o, "activate", cluster.NodeActive,
			"Make the node active again (after maintenance, a drain, or being marked out)"),
		nodeReplaceCmd(o), nodeRemoveCmd(o))
}

func nodeListCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List the nodes, whether they are up, what they hold, and their scrub schedules", Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Nodes(ctx)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printNodes(w, v) })
		},
	}
}

func parseNodeID(s string) (cluster.NodeID, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usageError{fmt.Errorf("node %q: want a node ID (basaltctl node list shows them)", s)}
	}
	return cluster.NodeID(id), nil
}

func nodeStateCmd(o *options, verb, state, short string) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use: verb + " NODE", Short: short, Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			n, err := o.client().SetNodeState(ctx, id, state)
			cancel()
			if err != nil {
				return err
			}
			if err := o.print(n, func(w io.Writer) { fmt.Fprintf(w, "node %d (%s) is %s\n", n.ID, n.Name, n.State) }); err != nil {
				return err
			}
			if wait && state == cluster.NodeDraining {
				return waitDrained(o, id)
			}
			return nil
		},
	}
	if state == cluster.NodeDraining {
		c.Flags().BoolVar(&wait, "wait", false, "wait until the node holds and leads no volume, showing progress")
	}
	return c
}

func nodeReplaceCmd(o *options) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use: "replace OLD NEW", Short: "Move every replica of node OLD to node NEW, then drain OLD",
		Args: exactArgs("OLD", "NEW"),
		RunE: func(_ *cobra.Command, args []string) error {
			old, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			with, err := parseNodeID(args[1])
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			n, err := o.client().ReplaceNode(ctx, old, with)
			cancel()
			if err != nil {
				return err
			}
			if err := o.print(n, func(w io.Writer) {
				fmt.Fprintf(w, "node %d is draining into node %d; follow with: basaltctl node list\n", old, with)
			}); err != nil {
				return err
			}
			if wait {
				return waitDrained(o, old)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until OLD holds no replica, showing progress")
	return c
}

func nodeRemoveCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "remove NODE", Short: "Remove a node that holds no replica (drain it first)", Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			defer cancel()
			if err := o.client().RemoveNode(ctx, id); err != nil {
				return err
			}
			return o.print(map[string]any{"removed": id}, func(w io.Writer) { fmt.Fprintf(w, "node %d removed\n", id) })
		},
	}
}

// waitDrained polls the node list until node id holds and leads nothing,
// printing the replicas left on it as they move.
func waitDrained(o *options, id cluster.NodeID) error {
	first, last := -1, -1
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nodes, err := o.client().Nodes(ctx)
		cancel()
		if err != nil {
			return err
		}
		var nv *api.NodeView
		for i := range nodes {
			if nodes[i].ID == id {
				nv = &nodes[i]
			}
		}
		if nv == nil {
			return fmt.Errorf("node %d is no longer in the cluster", id)
		}
		left := nv.Replicas + nv.Leading
		if first < 0 {
			first = max(left, 1)
		}
		if left != last {
			done := first - left
			fmt.Fprintf(o.out, "draining node %d: %d of %d moved (%d%%), %v\n", id, done, first,
				100*done/first, time.Since(start).Round(time.Second))
			last = left
		}
		if nv.Replicas == 0 && nv.Leading == 0 {
			fmt.Fprintf(o.out, "node %d holds no replica: remove it with: basaltctl node remove %d\n", id, id)
			return nil
		}
		time.Sleep(time.Second)
	}
}
