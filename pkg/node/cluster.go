package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
	"basalt/pkg/metrics"
	"basalt/pkg/pki"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/replication"
	"basalt/target"
	"basalt/target/tcp"
)

// clusterParts are what a cluster node runs besides the target.
type clusterParts struct {
	log *slog.Logger
	// transportStats reads the NVMe/TCP budget's counters for metrics.
	transportStats func() tcp.Stats
	db             *meta.DB
	drives         []disk.Drive // opened, until the store takes them
	store          *store.Store
	scrub          *store.Scrubber
	raftLog        pmem.Region
	host           *replication.Host
	cluster        *cluster.Cluster
	metrics        *metrics.Registry
	apiSrv         *http.Server
	apiLn          net.Listener
	apiOnce        sync.Once
	apiErr         error
	// join is the record of the cluster this node joined (join.go), nil
	// for an initial member; stamp is the identity it runs with.
	join  *joinRecord
	stamp identity.Stamp
	// security is the node's TLS material (security.go), nil with
	// [security] insecure.
	security *pki.Node
	// peers reads what a local replica cannot from the others, and serves
	// the local replicas to them (peer_read.go).
	peers *peerReads
	// sec is the node's certificates and the API's tokens (security.go),
	// nil with [security] insecure; client calls the other nodes' APIs with
	// them.
	sec    *nodeSecurity
	client *api.Client
}

// startCluster starts a cluster node; on error everything opened so far is
// closed again.
func startCluster(cfg *config.Config, log *slog.Logger) (n *Node, err error) {
	cp := &clusterParts{log: log}
	n = &Node{cfg: cfg, log: log, serveErr: make(chan error, 4), cl: cp}
	defer func() {
		if err != nil {
			_ = n.Close()
			n = nil
		}
	}()
	if err := os.MkdirAll(cfg.Node.DataDir, 0o700); err != nil {
		return n, fmt.Errorf("node: data directory: %w", err)
	}
	// A joining node gets its ID and its certificate first (join.go,
	// join_tls.go); then the material must be there.
	if cp.join, err = joinIfNew(cfg, log); err != nil {
		return n, err
	}
	if cp.sec, err = loadSecurity(cfg, log); err != nil { // security.go
		return n, err
	}
	cp.security, cp.client = cp.sec.pki(), cp.sec.client()
	if cl := cfg.Cluster; cl.Join == "" && !cl.InitialClusterID.IsZero() {
		if err := checkSecurityIdentity(cp.security, cl.NodeID, cl.InitialClusterID, cfg.Security.Dir); err != nil {
			return n, err
		}
	}
	if err := cp.openState(cfg, log); err != nil {
		return n, err
	}
	if err := n.newTarget(cfg, log); err != nil {
		return n, err
	}
	cp.transportStats = n.budget.Stats
	port, err := n.addPort()
	if err != nil {
		return n, err
	}
	if err := cp.startCluster(cfg, n.target, port.ID(), log); err != nil {
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
	if err := cp.startAPI(cfg, n.serveErr); err != nil {
		return n, err
	}
	return n, nil
}

// openState opens the metadata, the drives and the Raft log, checks that
// they are all this node's (identity.go) before anything is written to them,
// then opens the store and starts the Raft host.
func (cp *clusterParts) openState(cfg *config.Config, log *slog.Logger) error {
	if err := cp.openMetaAndDrives(cfg, log); err != nil {
		return err
	}
	if err := cp.openRaft(cfg, log); err != nil {
		return err
	}
	stamp, err := cp.checkIdentity(cfg, cp.drives)
	if err != nil {
		return err
	}
	cp.stamp = stamp
	if !startUnstamped { // the test hook has no stamp to check against
		if err := checkSecurityIdentity(cp.security, cfg.Cluster.NodeID, stamp.Cluster, cfg.Security.Dir); err != nil {
			return err
		}
	}
	if err := cp.openStore(cfg, log, stamp); err != nil {
		return err
	}
	if err := cp.host.Start(); err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	return nil
}

// openStorage opens a single node's metadata and, with [store], its store
// (no Raft log, no identity stamps).
func (cp *clusterParts) openStorage(cfg *config.Config, log *slog.Logger) error {
	if err := cp.openMetaAndDrives(cfg, log); err != nil {
		return err
	}
	return cp.openStore(cfg, log, identity.Stamp{})
}

// openMetaAndDrives opens the metadata and, with [store], the drives.
func (cp *clusterParts) openMetaAndDrives(cfg *config.Config, log *slog.Logger) error {
	db, err := meta.Open(meta.Options{Dir: filepath.Join(cfg.Node.DataDir, "meta"), Logger: log})
	if err != nil {
		return fmt.Errorf("node: metadata: %w", err)
	}
	cp.db = db
	if sc := cfg.Store; sc != nil {
		for _, p := range sc.Drives {
			d, err := openDrive(db, p, int64(sc.DriveSize), log) // drives.go: a lost drive opens degraded
			if err != nil {
				return err
			}
			cp.drives = append(cp.drives, d)
		}
	}
	return nil
}

// openStore opens the store, with [store], on the drives and a write
// buffer, and starts its scrub schedule. A new store is formatted with
// stamp (store.Options.Stamp), an existing one checked against it.
func (cp *clusterParts) openStore(cfg *config.Config, log *slog.Logger, stamp identity.Stamp) error {
	sc := cfg.Store
	if sc == nil {
		return nil
	}
	policy, err := store.ParseGCPolicy(sc.GCPolicy)
	if err != nil {
		return err
	}
	discard, err := store.ParseDiscardMode(sc.Discard)
	if err != nil {
		return err
	}
	opts := store.Options{Meta: cp.db, Stamp: stamp, Parity: sc.Parity, Data: sc.Data, ChunkSize: int(sc.ChunkSize),
		SegmentStripes: sc.SegmentStripes, GCPolicy: policy, Discard: discard, Logger: log.With("part", "store"),
		Clock: clock.Real()}
	if sc.InMemoryBuffer() {
		// The Raft log holds every write until the store has destaged it:
		// the store stages the log's own bytes instead of a copy.
		opts.StageByReference, opts.StagedSize = true, int64(cfg.RaftLog.Size)
		log.Info("store stages writes by reference to the Raft log", "raft_log", cfg.RaftLog.Path)
	} else {
		region, err := openStoreBuffer(sc)
		if err != nil {
			return err
		}
		log.Info("store write buffer", "path", sc.Buffer, "mode", region.Mode().String(),
			"survives_power_loss", region.Mode().Durable())
		opts.Buffer = region
	}
	opts.Drives, cp.drives = cp.drives, nil
	if cp.store, err = store.Open(opts); err != nil { // closes drives and region on error
		return fmt.Errorf("node: store: %w", err)
	}
	if err := startRebuilder(cp.store, sc); err != nil {
		return err
	}
	return cp.startScrubber(cfg, log.With("part", "scrub"))
}

// openStoreBuffer maps the store's write buffer file.
func openStoreBuffer(sc *config.Store) (pmem.Region, error) {
	region, err := pmem.OpenFile(sc.Buffer, int(sc.BufferSize))
	if err != nil {
		return nil, fmt.Errorf("node: write buffer %s: %w", sc.Buffer, err)
	}
	return region, nil
}

func closeDrives(ds []disk.Drive) {
	for _, d := range ds {
		_ = d.Close()
	}
}

// openRaft maps the Raft log region and creates the Raft host, which
// recovers the log; openState starts it once the log is known to be this
// node's.
func (cp *clusterParts) openRaft(cfg *config.Config, log *slog.Logger) error {
	cl, rl := cfg.Cluster, cfg.RaftLog
	if err := os.MkdirAll(filepath.Dir(rl.Path), 0o700); err != nil {
		return fmt.Errorf("node: raft log directory: %w", err)
	}
	region, err := pmem.OpenFileWith(rl.Path, int(rl.Size), pmem.FileOptions{Msync: rl.Persist == config.PersistMsync})
	if err != nil {
		return fmt.Errorf("node: raft log %s: %w", rl.Path, err)
	}
	cp.raftLog = region
	log.Info("raft log mapped", "path", rl.Path, "mode", region.Mode().String(), "survives_power_loss", region.Mode().Durable())
	peers := map[replication.NodeID]string{}
	for _, p := range cl.Peers {
		if p.ID != cl.NodeID {
			peers[replication.NodeID(p.ID)] = p.Raft
		}
	}
	cp.host, err = replication.NewHost(replication.Config{
		NodeID: replication.NodeID(cl.NodeID), Listen: cl.RaftListen, Peers: peers, LogRegion: region,
		Clock: clock.Real(), Logger: log.With("part", "raft"), TickInterval: time.Duration(cl.RaftTick),
		ElectionTicks: cl.ElectionTicks, HeartbeatTicks: cl.HeartbeatTicks, SnapshotRate: cl.SnapshotBytesPerSecond(),
		AlwaysAwake: []replication.GroupID{replication.GroupID(cluster.MetadataGroup)}, // never quiesced
		TLS:         raftTLS(cp.security),
	})
	if err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	return nil
}

// startCluster restores the metadata and starts the membership.
func (cp *clusterParts) startCluster(cfg *config.Config, t *target.Target, port uint16, log *slog.Logger) error {
	cl := cfg.Cluster
	m, err := cluster.NewMachine(metaPersister{db: cp.db}, log.With("part", "metadata"))
	if err != nil {
		return err
	}
	var peers []cluster.Node
	var self cluster.Node
	for _, p := range cl.Peers {
		n := cluster.Node{ID: cluster.NodeID(p.ID), Name: p.Name, NVMeAddr: p.NVMe, RaftAddr: p.Raft, APIAddr: p.API}
		if p.ID == cl.NodeID {
			n.NVMeAddr, n.Name, n.Zone = cfg.NVMe.Advertise, cfg.Node.Name, cl.Zone
			n.NVMeTLS = cfg.NVMe.TLS
			if cp.store != nil {
				n.Capacity = cp.store.Stats().CapacityBytes
			}
			self = n
		}
		peers = append(peers, n)
	}
	var replicas cluster.Replicas = cluster.FileReplicas{Dir: filepath.Join(cfg.Node.DataDir, "replicas")}
	src := metrics.Sources{Target: t.Stats, Transport: cp.transportStats}
	if cp.store != nil {
		replicas, src.Store = storeReplicas{s: cp.store}, storeSample(cp.store, cp.scrub)
	}
	keys, err := loadKeyring(cfg.Security.KEKFile)
	if err != nil {
		return err
	}
	src.Cluster = func() cluster.LocalStatus { return cp.cluster.Local() }
	cp.metrics = metrics.New(src, clock.Real())
	cp.peers = newPeerReads(replication.NodeID(cl.NodeID), cp.client, log.With("part", "peer-read"))
	cp.cluster, err = cluster.Start(cluster.Config{
		Self: self, Peers: peers, Machine: m, Replicator: raftReplicator{h: cp.host, peers: cp.peers}, Replicas: replicas,
		Keys: keys, Target: t, Port: port, Forward: cp.client.Forwarder(),
		Wrap: func(v *cluster.Volume, b backend.Backend) backend.Backend {
			return cp.metrics.TrackVolume(v.Name, b)
		},
		Unwrap: func(v *cluster.Volume) { cp.metrics.ForgetVolume(v.Name) },
		Clock:  clock.Real(), Logger: log.With("part", "cluster"),
		DownOutInterval: time.Duration(cl.DownOutInterval),
		JoinMetadata:    cp.joinVoters(),
		LeaderApplied: func(ctx context.Context, addr string) (uint64, error) {
			l, err := cp.client.At(addr).Local(ctx)
			return l.Metadata.Applied, err
		},
		SetPeer: func(id cluster.NodeID, addr string) { cp.host.SetPeer(replication.NodeID(id), addr) },
	})
	cp.peers.setCluster(cp.cluster)
	return err
}

// startAPI serves the HTTP API and /metrics.
func (cp *clusterParts) startAPI(cfg *config.Config, serveErr chan<- error) error {
	ln, err := net.Listen("tcp", cfg.Cluster.APIListen)
	if err != nil {
		return fmt.Errorf("node: API listen %s: %w", cfg.Cluster.APIListen, err)
	}
	cp.apiLn = ln
	acfg := api.Config{Cluster: cp.cluster, Metrics: cp.metrics.Handler(), Logger: cp.log.With("part", "api"),
		ClusterID: func() string { return cp.stamp.Cluster.String() },
		Client:    cp.client, Security: cp.sec.api(cfg.Security)}
	if cp.scrub != nil {
		acfg.Scrub = func() *api.ScrubView { return scrubView(cp.scrub) }
	}
	if cp.store != nil {
		acfg.Drives = newNodeDrives(cp.store, cfg.Store, cp.log.With("part", "drives"))
	}
	if cp.peers != nil {
		acfg.PeerReads = cp.peers
	}
	h := api.NewServer(acfg)
	cp.apiSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cp.log.With("part", "api").Handler(), slog.LevelInfo)} // TLS handshake refusals
	cp.log.Info("API listening", "addr", ln.Addr().String(), "https", cp.sec != nil)
	srvLn := cp.sec.listen(ln)
	go func() {
		if err := cp.apiSrv.Serve(srvLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	return nil
}

// APIAddr returns the bound address of a cluster node's API, or nil.
func (n *Node) APIAddr() net.Addr {
	if n.cl == nil || n.cl.apiLn == nil {
		return nil
	}
	return n.cl.apiLn.Addr()
}

// Cluster returns a cluster node's membership, or nil.
func (n *Node) Cluster() *cluster.Cluster {
	if n.cl == nil {
		return nil
	}
	return n.cl.cluster
}

func (cp *clusterParts) shutdownAPI(ctx context.Context) error {
	cp.apiOnce.Do(func() {
		if cp.apiSrv != nil {
			cp.apiErr = cp.apiSrv.Shutdown(ctx)
		}
	})
	return cp.apiErr
}

// close stops the membership and the Raft host, then takes the volumes
// down (in that order, so that no group applies to a closed replica).
func (cp *clusterParts) close() error {
	var errs []error
	if cp.cluster != nil {
		cp.cluster.Stop()
	}
	if cp.host != nil {
		if err := cp.host.Close(); err != nil && !errors.Is(err, replication.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if cp.cluster != nil {
		errs = append(errs, cp.cluster.Close())
	}
	return errors.Join(errs...)
}

// closeStorage stops the scrub schedule, then closes the store, the Raft
// log region and the metadata.
func (cp *clusterParts) closeStorage() error {
	var errs []error
	if cp.scrub != nil {
		cp.scrub.Close()
	}
	if cp.store != nil {
		errs = append(errs, cp.store.Close())
	}
	closeDrives(cp.drives) // opened, not yet handed to the store
	if cp.raftLog != nil {
		errs = append(errs, cp.raftLog.Close())
	}
	if cp.db != nil {
		errs = append(errs, cp.db.Close())
	}
	return errors.Join(errs...)
}
