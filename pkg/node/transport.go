package node

import (
	"fmt"
	"log/slog"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/config"
	"basalt/target"
	"basalt/target/tcp"
)

// newTarget builds the node's NVMe target and the transport budget its
// listeners share, both from the [nvme] limits: one Budget per node, so the
// connection and buffer limits hold across every listener.
func (n *Node) newTarget(cfg *config.Config, log *slog.Logger) error {
	l := cfg.NVMe.NVMeLimits
	budget, err := tcp.NewBudget(tcp.Limits{MaxConnections: l.MaxConnections,
		MaxConnectionsPerHost: l.MaxConnectionsPerHost, MaxWriteBytes: int64(l.MaxWriteBytes),
		MaxControllerWriteBytes: int64(l.MaxControllerWriteBytes), MaxReadBytes: int64(l.MaxReadBytes)})
	if err != nil {
		return fmt.Errorf("node: nvme limits: %w", err)
	}
	n.budget = budget
	t, err := target.New(target.Config{Logger: log, Clock: clock.Real(),
		CNTLIDMin: cfg.NVMe.CNTLIDMin, CNTLIDMax: cfg.NVMe.CNTLIDMax, DrainTimeout: time.Duration(l.DrainTimeout),
		DiscoveryAuth: cfg.NVMe.DiscoveryAuth})
	if err != nil {
		return fmt.Errorf("node: target: %w", err)
	}
	n.target = t
	return nil
}

// transportOptions are the options of every NVMe/TCP listener of the node.
func (n *Node) transportOptions() tcp.Options {
	l := n.cfg.NVMe.NVMeLimits
	return tcp.Options{Logger: n.log, Budget: n.budget, ICReqTimeout: time.Duration(l.ICReqTimeout),
		ConnectTimeout: time.Duration(l.ConnectTimeout), H2CDataTimeout: time.Duration(l.H2CDataTimeout)}
}
