// Package node assembles one Basalt storage node from its configuration.
// cmd/basaltd is a thin main around it.
//
// A single node (no [cluster] section) serves the [[subsystem]]s of its
// file: their backends, the NVMe target and the NVMe/TCP listeners.
//
// A cluster node (cluster.go) opens its metadata store (badger), its
// log-structured store when [store] is configured (with its background
// scrub schedule, whose state is <data_dir>/scrub.json; scrub_state.go),
// the persistent-memory
// region of its Raft logs, the Raft host, the NVMe target with its port
// (port ID and controller-ID range from the node ID), the cluster
// membership with its reconciler, and the HTTP API with /metrics.
package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"basalt/pkg/backend"
	"basalt/pkg/config"
	"basalt/pkg/nvme"
	"basalt/target"
	"basalt/target/tcp"
)

// Node is a running storage node.
type Node struct {
	cfg       *config.Config
	log       *slog.Logger
	target    *target.Target
	listeners []*tcp.Listener
	budget    *tcp.Budget // the listeners' shared connection and buffer limits
	backends  []backend.Backend
	serveErr  chan error
	// cl is the cluster part; nil on a single node.
	cl *clusterParts
	// storage holds a single node's store (with [store]); nil otherwise.
	storage *clusterParts
}

// Start opens every namespace's backend, builds the target and starts serving.
// On error everything opened so far is closed again.
func Start(cfg *config.Config, log *slog.Logger) (n *Node, err error) {
	if cfg.Cluster != nil {
		return startCluster(cfg, log)
	}
	n = &Node{cfg: cfg, log: log, serveErr: make(chan error, 2)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.newTarget(cfg, log); err != nil {
		return n, err
	}
	if cfg.Store != nil {
		n.storage = &clusterParts{log: log}
		if err := n.storage.openStorage(cfg, log); err != nil {
			return n, err
		}
	}
	for _, s := range cfg.Subsystems {
		if err := n.addSubsystem(s); err != nil {
			return n, err
		}
	}
	port, err := n.addPort()
	if err != nil {
		return n, err
	}
	if err := n.listen(cfg.NVMe.Listen, port); err != nil {
		return n, err
	}
	if cfg.NVMe.DiscoveryListen != "" {
		if err := n.listen(cfg.NVMe.DiscoveryListen, port); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (n *Node) addSubsystem(s config.Subsystem) error {
	sc := target.SubsystemConfig{
		NQN: s.NQN, Serial: s.Serial, Model: s.Model,
		AllowAnyHost: s.AllowAnyHost, Hosts: s.Hosts,
	}
	for _, h := range s.HostSecrets {
		sec, err := h.Resolve()
		if err != nil {
			return fmt.Errorf("node: subsystem %s: %w", s.NQN, err)
		}
		if sc.Secrets == nil {
			sc.Secrets = map[string]target.HostSecrets{}
		}
		sc.Secrets[h.Host] = target.HostSecrets{DHCHAPKey: sec.DHCHAPSecret, DHCHAPCtrlKey: sec.DHCHAPCtrlSecret,
			TLSPSK: sec.TLSPSK}
	}
	for _, ns := range s.Namespaces {
		b, err := n.openBackend(s.NQN, ns)
		if err != nil {
			return fmt.Errorf("node: subsystem %s namespace %d: %w", s.NQN, ns.NSID, err)
		}
		n.backends = append(n.backends, b)
		nguid, uuid, err := namespaceIDs(s.NQN, ns)
		if err != nil {
			return err
		}
		sc.Namespaces = append(sc.Namespaces, target.NamespaceConfig{
			NSID: ns.NSID, Backend: b, NGUID: nguid, UUID: uuid,
		})
		n.log.Info("namespace ready", "subsystem", s.NQN, "nsid", ns.NSID,
			"backend", ns.Backend, "path", ns.Path, "size", int64(ns.Size), "block_size", ns.BlockSize)
	}
	if _, err := n.target.AddSubsystem(sc); err != nil {
		return fmt.Errorf("node: subsystem %s: %w", s.NQN, err)
	}
	return nil
}

func (n *Node) openBackend(nqn string, ns config.Namespace) (backend.Backend, error) {
	switch ns.Backend {
	case "store":
		return n.openStoreVolume(nqn, ns)
	case "memory":
		return backend.NewMemory(int64(ns.Size), ns.BlockSize)
	case "file":
		return backend.OpenFile(ns.Path, int64(ns.Size), ns.BlockSize)
	}
	return nil, fmt.Errorf("unknown backend %q", ns.Backend)
}

// namespaceIDs returns the configured UUID, or one derived from the subsystem
// NQN and NSID so that every node serving the namespace reports the same IDs;
// the NGUID is derived the same way.
func namespaceIDs(nqn string, ns config.Namespace) (nguid, uuid [16]byte, err error) {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", nqn, ns.NSID)))
	copy(nguid[:], sum[:16])
	copy(uuid[:], sum[16:32])
	uuid[6] = uuid[6]&0x0F | 0x80 // version 8 (custom), RFC 9562
	uuid[8] = uuid[8]&0x3F | 0x80
	if ns.UUID != "" {
		h := strings.ReplaceAll(ns.UUID, "-", "")
		if _, err := fmt.Sscanf(h, "%32x", &uuid); err != nil || len(h) != 32 {
			return nguid, uuid, fmt.Errorf("node: namespace %d uuid %q: want 32 hex digits", ns.NSID, ns.UUID)
		}
	}
	return nguid, uuid, nil
}

func (n *Node) addPort() (*target.Port, error) {
	host, portStr, err := net.SplitHostPort(n.cfg.NVMe.Advertise)
	if err != nil {
		return nil, fmt.Errorf("node: advertise: %w", err)
	}
	fam := uint8(nvme.AddressFamilyIPv4)
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		fam = nvme.AddressFamilyIPv6
	}
	mode, err := target.ParseTLSMode(n.cfg.NVMe.TLS)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	p, err := n.target.AddPort(target.PortConfig{ID: n.cfg.NVMe.PortID, TRADDR: host, TRSVCID: portStr, ADRFAM: fam, TLS: mode})
	if err != nil {
		return nil, fmt.Errorf("node: port: %w", err)
	}
	return p, nil
}

func (n *Node) listen(addr string, port *target.Port) error {
	l, err := tcp.Listen(n.target, port, addr, n.transportOptions())
	if err != nil {
		return fmt.Errorf("node: listen %s: %w", addr, err)
	}
	n.listeners = append(n.listeners, l)
	n.log.Info("NVMe/TCP listening", "addr", l.Addr().String(), "advertise", n.cfg.NVMe.Advertise)
	go func() { n.serveErr <- l.Serve() }()
	return nil
}

// Addr returns the bound address of the first listener.
func (n *Node) Addr() net.Addr { return n.listeners[0].Addr() }

// Target returns the node's NVMe target.
func (n *Node) Target() *target.Target { return n.target }

// Shutdown stops accepting connections, closes the existing ones gracefully
// (bounded by ctx), then closes the target and the backends (flushing them).
// A cluster node also stops its API, its Raft groups and its stores.
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	if n.cl != nil {
		errs = append(errs, n.cl.shutdownAPI(ctx))
	}
	for _, l := range n.listeners {
		if err := l.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	n.listeners = nil
	errs = append(errs, n.Close())
	return errors.Join(errs...)
}

// Close stops everything immediately.
func (n *Node) Close() error {
	var errs []error
	if n.cl != nil {
		errs = append(errs, n.cl.shutdownAPI(context.Background()))
	}
	for _, l := range n.listeners {
		errs = append(errs, l.Close())
	}
	n.listeners = nil
	// The reconciler stops first (it changes the target), then the target
	// closes, so that every volume's removal below shares the target's
	// one drain (Config.DrainTimeout after Close) instead of each waiting
	// its own.
	if n.cl != nil && n.cl.cluster != nil {
		n.cl.cluster.Stop()
	}
	if n.target != nil {
		errs = append(errs, n.target.Close())
	}
	if n.cl != nil {
		errs = append(errs, n.cl.close())
	}
	if n.cl != nil {
		errs = append(errs, n.cl.closeStorage())
		n.cl = nil
	}
	for _, b := range n.backends {
		errs = append(errs, b.Flush(context.Background()), b.Close())
	}
	n.backends = nil
	if n.storage != nil {
		errs = append(errs, n.storage.closeStorage())
		n.storage = nil
	}
	return errors.Join(errs...)
}

// openStoreVolume opens (or creates, on first start) the store volume that
// backs a single node's namespace. The volume is named after the subsystem
// NQN and NSID, so a restart finds its data again.
func (n *Node) openStoreVolume(nqn string, ns config.Namespace) (backend.Backend, error) {
	name := fmt.Sprintf("%s/ns%d", nqn, ns.NSID)
	v, err := storeReplicas{s: n.storage.store}.Open(name, int64(ns.Size))
	if err != nil {
		return nil, err
	}
	if v.Size() != int64(ns.Size) {
		_ = v.Close()
		return nil, fmt.Errorf("store volume %s holds %d bytes, the configuration says %d", name, v.Size(), int64(ns.Size))
	}
	return v, nil
}
