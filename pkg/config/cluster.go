package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"basalt/pkg/identity"
)

// The cluster sections. A cluster node's file (scripts/run.sh writes three
// of these):
//
//	[node]
//	name = "node1"
//	data_dir = "/var/lib/basalt"       # metadata (badger) and file replicas
//
//	[nvme]
//	listen = "0.0.0.0:4420"            # default: this node's peer nvme address
//	advertise = "10.0.2.2:4420"        # default: this node's peer nvme address
//
//	[cluster]
//	node_id = 1                        # 1..64; also the NVMe port ID
//	raft_listen = "0.0.0.0:9520"       # default: this node's peer raft address
//	api_listen = "127.0.0.1:9420"      # HTTP API and /metrics; default: peer api
//	bootstrap = true                   # first start of an empty node: form the cluster
//	initial_cluster_id = "6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a1"  # with bootstrap: the
//	                                   # same UUID on every initial member (uuidgen)
//	raft_tick = "50ms"                 # Raft clock; election after election_ticks
//	election_ticks = 10
//	heartbeat_ticks = 1
//	  [[cluster.peer]]                 # every node, this one included
//	  id = 1
//	  name = "node1"
//	  raft = "127.0.0.1:9520"          # where the other nodes reach its Raft port
//	  nvme = "127.0.0.1:4420"          # the NVMe/TCP address hosts use (discovery)
//	  api = "127.0.0.1:9420"           # where the other nodes reach its API
//
//	[store]                            # optional: replicas in the log-structured store
//	drives = ["/var/lib/basalt/d0", "/var/lib/basalt/d1", "/var/lib/basalt/d2"]
//	drive_size = "4GiB"                # files are created sparse
//	buffer = "memory"                  # staging: the Raft log on pmem holds the writes
//	                                   # (a node without [cluster]: a file on DAX, or tmpfs for dev)
//	buffer_size = "256MiB"
//	parity = 1                         # k+1 across the drives
//	chunk_size = "128KiB"
//	segment_stripes = 32
//	gc_policy = "cost-benefit"
//	discard = "auto"                   # tell drives of freed segments: block devices only; "on", "off"
//	scrub_interval = "168h"            # read and verify every stripe once a week; "0": never
//	scrub_rate = "64MiB"               # scrub reads per second, summed over the drives
//
//	[raft_log]
//	path = "/dev/shm/basalt-node1.raft"   # default: <data_dir>/raft.log
//	size = "256MiB"

// MaxNodeID is the largest node ID. Node IDs select controller ID ranges
// (CNTLIDRange): 64 slots of 0x3FF IDs below 0xFFF0.
const MaxNodeID = 64

// Cluster makes a node a member of a cluster.
type Cluster struct {
	// NodeID is this node's ID, 1..MaxNodeID, unique in the cluster. It is
	// also its NVMe port ID and selects its controller ID range.
	NodeID uint64 `toml:"node_id"`
	// RaftListen is the address the Raft transport binds. Default: this
	// node's peer raft address.
	RaftListen string `toml:"raft_listen"`
	// APIListen is the address of the HTTP API and /metrics. Default:
	// this node's peer api address.
	APIListen string `toml:"api_listen"`
	// Bootstrap lets an empty node (no Raft log, no metadata, no store
	// data) form the cluster from Peers on its first start; every initial
	// member sets it, with the same InitialClusterID. It never applies to
	// a node that has state: one whose state is incomplete or foreign is
	// refused whatever this says (pkg/node, identity). An empty node
	// without it refuses to start. Default false.
	Bootstrap bool `toml:"bootstrap"`
	// InitialClusterID is the cluster UUID the bootstrapping members stamp
	// into their state (pkg/identity), in the canonical 8-4-4-4-12 form;
	// required with Bootstrap, identical on every initial member (like
	// etcd's initial-cluster-token). Set on a node with state, it must be
	// the UUID that state carries; it is also how a node whose state
	// predates identity stamps adopts them.
	InitialClusterID identity.ClusterUUID `toml:"initial_cluster_id"`
	// RaftTick is the Raft clock period. Default 50ms.
	RaftTick Duration `toml:"raft_tick"`
	// ElectionTicks and HeartbeatTicks are in RaftTicks. Defaults 10, 1.
	ElectionTicks  int `toml:"election_ticks"`
	HeartbeatTicks int `toml:"heartbeat_ticks"`
	// Join is the API address (host:port) of any member of a running
	// cluster that this new node joins (basaltctl node add prints the
	// configuration): on its first start the node asks that member for an
	// ID, the cluster's UUID and its members, records them in
	// <data_dir>/cluster-join.json, and catches up as a learner of the
	// metadata group. node_id and the peers are then not needed; raft_listen,
	// api_listen and nvme.advertise must be addresses the others reach.
	Join string `toml:"join"`
	// Zone is this node's failure domain (a rack, a room): a volume's
	// replicas go to distinct zones when the cluster has enough. Empty:
	// a zone of its own.
	Zone string `toml:"zone"`
	// DownOutInterval is how long a node may be unreachable before it is
	// marked out and its replicas are re-created on other nodes. Default
	// 10m; tests set seconds.
	DownOutInterval Duration `toml:"down_out_interval"`
	// SnapshotRate bounds the bytes per second a snapshot streams to one
	// follower (a replica being added, or one back after being away).
	// Default 256MiB; "0" streams unpaced.
	SnapshotRate *Size `toml:"snapshot_rate"`
	// Peers lists every node of the cluster, this one included.
	Peers []Peer `toml:"peer"`
}

// DefaultSnapshotRate is SnapshotRate's default.
const DefaultSnapshotRate = 256 << 20

// SnapshotBytesPerSecond returns the snapshot rate in force (0: unpaced).
func (c *Cluster) SnapshotBytesPerSecond() int64 {
	if c.SnapshotRate == nil {
		return DefaultSnapshotRate
	}
	return int64(*c.SnapshotRate)
}

// Peer is one node of the cluster as the others reach it.
type Peer struct {
	ID   uint64 `toml:"id"`
	Name string `toml:"name"`
	// Raft is the node's Raft transport address.
	Raft string `toml:"raft"`
	// NVMe is the NVMe/TCP address hosts connect to (its advertise
	// address), listed in every node's discovery log.
	NVMe string `toml:"nvme"`
	// API is the node's HTTP API address.
	API string `toml:"api"`
}

// Store configures the node's log-structured store (pkg/store).
type Store struct {
	// Drives are drive files or block devices, in slot order.
	Drives []string `toml:"drives"`
	// DriveSize is the size of each drive file; 0: the existing size.
	DriveSize Size `toml:"drive_size"`
	// Buffer is the write-buffer file and BufferSize its size. On a
	// cluster node Buffer may be empty or "memory": the store then stages
	// writes in process memory, since the Raft log on persistent memory
	// keeps every write until the store has destaged it, so data reach
	// persistent memory once. A node without [cluster] needs a file.
	Buffer     string `toml:"buffer"`
	BufferSize Size   `toml:"buffer_size"`
	// Parity and Data are the stripe geometry in chunks (format time);
	// 0 and 0: one parity chunk, data across the other drives.
	Parity int `toml:"parity"`
	Data   int `toml:"data"`
	// ChunkSize and SegmentStripes: format time; 0 for the defaults.
	ChunkSize      Size `toml:"chunk_size"`
	SegmentStripes int  `toml:"segment_stripes"`
	// GCPolicy is "cost-benefit" (default) or "greedy".
	GCPolicy string `toml:"gc_policy"`
	// Discard says which drives are told that a freed segment's range is
	// unused: "auto" (default: block devices, not drive files, whose
	// punched holes the filesystem must fill again on the next write),
	// "on" (files too: they give their space back) or "off".
	Discard string `toml:"discard"`
	// ScrubInterval: in the background, every stripe is read, verified
	// and repaired from parity once per ScrubInterval (store.Scrubber).
	// Unset: DefaultScrubInterval; an explicit "0" turns the scrub off.
	ScrubInterval *Duration `toml:"scrub_interval"`
	// ScrubRate bounds the scrub's drive reads in bytes per second,
	// summed over the drives, so that it does not starve host I/O.
	// Unset: DefaultScrubRate.
	ScrubRate *Size `toml:"scrub_rate"`
	// RebuildRate bounds the background rebuild's drive I/O after a drive
	// loss, in bytes per second. 0: DefaultRebuildRate.
	RebuildRate Size `toml:"rebuild_rate"`
}

// RaftLog is the persistent-memory region holding the node's Raft logs.
type RaftLog struct {
	// Path is the region's file: on a DAX filesystem for persistent
	// memory, on tmpfs for development. Default <data_dir>/raft.log.
	Path string `toml:"path"`
	// Size in bytes. Default 256MiB.
	Size Size `toml:"size"`
	// Persist is how the region's writes are made durable: "auto" (the
	// default: cache-line write-back on a MAP_SYNC mapping where the file
	// is on a DAX filesystem, msync elsewhere) or PersistMsync (msync even
	// on DAX, to measure one against the other).
	Persist string `toml:"persist"`
}

// PersistMsync is the raft_log.persist value that makes the region persist
// with msync even on a DAX filesystem (pmem.FileOptions.Msync).
const PersistMsync = "msync"

// Duration is a time.Duration written as "50ms", "2s".
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("config: duration %q: want a number with a unit like 50ms", b)
	}
	*d = Duration(v)
	return nil
}

// BootstrapEnabled reports whether the node may form the cluster.
func (c *Cluster) BootstrapEnabled() bool { return c.Bootstrap }

// Self returns this node's peer entry (zero if absent; Validate reports it).
func (c *Cluster) Self() Peer {
	for _, p := range c.Peers {
		if p.ID == c.NodeID {
			return p
		}
	}
	return Peer{}
}

// CNTLID slots: the controller ID space below 0xFFF0 is cut into 64 slots
// of cntlidSlotSize IDs; slot s is s*cntlidSlotSize+1 ..
// s*cntlidSlotSize+cntlidSlotSize-1 (the last one ends at 0xFFEF). A
// controller ID need only be unique within its subsystem (the target
// allocates per subsystem), so 1023 IDs are 1023 controllers of one
// volume on one node.
const (
	cntlidSlotSize = 0x400
	cntlidMax      = 0xFFEF
)

// CNTLIDRange returns the controller IDs node id (1..MaxNodeID) hands out:
// disjoint for distinct IDs. Nodes 1..15 take slot 4*id, the first 0x3FF
// IDs of the range id*0x1000+1 .. id*0x1000+0xFFF that nodes 1..14 used
// before node IDs went past 14, so a rolling upgrade of such a cluster
// never gives two nodes overlapping ranges. Node 16 takes slot 0 (IDs
// 1..0x3FF, which no node used), and nodes 17..64 the other 48 slots, in
// order; these lie inside the old ranges of nodes 1..14, so add a node
// with an ID above 16 only once every node runs a version with this
// scheme.
func CNTLIDRange(id uint64) (lo, hi uint16) {
	var slot uint64
	switch {
	case id <= 15:
		slot = 4 * id
	case id == 16:
		slot = 0
	default:
		i := id - 17
		slot = 4*(i/3) + i%3 + 1
	}
	lo = uint16(slot*cntlidSlotSize + 1)
	hi = uint16(min(slot*cntlidSlotSize+cntlidSlotSize-1, cntlidMax))
	return lo, hi
}

func (c *Config) clusterDefaults() {
	cl := c.Cluster
	self := cl.Self()
	if c.Node.Name == "" {
		c.Node.Name = self.Name
		if c.Node.Name == "" {
			c.Node.Name = fmt.Sprintf("node%d", cl.NodeID)
		}
	}
	for i := range cl.Peers {
		if cl.Peers[i].Name == "" {
			cl.Peers[i].Name = fmt.Sprintf("node%d", cl.Peers[i].ID)
		}
	}
	c.NVMe.Listen = cmp.Or(c.NVMe.Listen, self.NVMe)
	c.NVMe.Advertise = cmp.Or(c.NVMe.Advertise, self.NVMe)
	if c.NVMe.PortID == 0 {
		c.NVMe.PortID = uint16(cl.NodeID)
	}
	if c.NVMe.CNTLIDMin == 0 && c.NVMe.CNTLIDMax == 0 && cl.NodeID >= 1 && cl.NodeID <= MaxNodeID {
		c.NVMe.CNTLIDMin, c.NVMe.CNTLIDMax = CNTLIDRange(cl.NodeID)
	}
	cl.RaftListen = cmp.Or(cl.RaftListen, self.Raft)
	cl.APIListen = cmp.Or(cl.APIListen, self.API)
	if cl.RaftTick == 0 {
		cl.RaftTick = Duration(50 * time.Millisecond)
	}
	if cl.ElectionTicks == 0 {
		cl.ElectionTicks = 10
	}
	if cl.HeartbeatTicks == 0 {
		cl.HeartbeatTicks = 1
	}
	if c.RaftLog.Path == "" && c.Node.DataDir != "" {
		c.RaftLog.Path = filepath.Join(c.Node.DataDir, "raft.log")
	}
	if c.RaftLog.Size == 0 {
		c.RaftLog.Size = 256 << 20
	}
}

// BufferInMemory is the Buffer value that stages writes in process memory.
const BufferInMemory = "memory"

// InMemoryBuffer reports whether the store stages writes in process memory
// (Buffer empty or "memory").
func (s *Store) InMemoryBuffer() bool { return s.Buffer == "" || s.Buffer == BufferInMemory }

// validateCluster checks the cluster sections (nothing without [cluster],
// except that [store] needs it).
func (c *Config) validateCluster() []error {
	cl := c.Cluster
	if cl == nil {
		var errs []error
		if c.Store != nil && c.Node.DataDir == "" {
			errs = append(errs, fmt.Errorf("[store] needs node.data_dir (the store's metadata lives there)"))
		}
		if c.Store != nil && c.Store.InMemoryBuffer() {
			errs = append(errs, fmt.Errorf("store.buffer: a node without [cluster] needs a write-buffer file "+
				"(on a DAX filesystem, or tmpfs for development); \"memory\" suits only a cluster node, whose Raft log holds the writes"))
		}
		return errs
	}
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Subsystems) > 0 {
		add("[[subsystem]] cannot be used with [cluster]: create volumes with basaltctl volume create")
	}
	if c.Node.DataDir == "" {
		add("node.data_dir is required in a cluster (metadata and replicas live there)")
	}
	joining := cl.Join != "" && cl.NodeID == 0
	if !joining && (cl.NodeID < 1 || cl.NodeID > MaxNodeID) {
		add("cluster.node_id %d: want 1..%d", cl.NodeID, MaxNodeID)
	}
	if !joining && c.NVMe.PortID != uint16(cl.NodeID) {
		add("nvme.port_id %d: in a cluster the port ID is the node ID (%d); leave it unset", c.NVMe.PortID, cl.NodeID)
	}
	if cl.Join != "" && cl.Bootstrap {
		add("cluster.join and cluster.bootstrap exclude each other: a node either forms the cluster or joins one")
	}
	if joining {
		if _, _, err := net.SplitHostPort(cl.Join); err != nil {
			add("cluster.join %q: want the host:port of a member's API: %v", cl.Join, err)
		}
		if c.NVMe.Advertise == "" {
			add("a joining node needs nvme.advertise, the address hosts connect to")
		}
	}
	if cl.Bootstrap && cl.InitialClusterID.IsZero() {
		add("cluster.bootstrap needs cluster.initial_cluster_id: one UUID (uuidgen makes one), " +
			"the same on every initial member")
	}
	if !joining {
		errs = append(errs, validatePeers(cl)...)
	}
	for what, a := range map[string]string{"cluster.raft_listen": cl.RaftListen, "cluster.api_listen": cl.APIListen} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add("%s %q: %v", what, a, err)
		}
	}
	if cl.ElectionTicks <= cl.HeartbeatTicks || cl.HeartbeatTicks < 1 || cl.RaftTick <= 0 {
		add("cluster: want raft_tick > 0 and election_ticks > heartbeat_ticks >= 1")
	}
	if c.RaftLog.Size < 1<<20 {
		add("raft_log.size %d: want at least 1MiB", c.RaftLog.Size)
	}
	if p := c.RaftLog.Persist; p != "" && p != "auto" && p != PersistMsync {
		add("raft_log.persist %q: want auto or %s", p, PersistMsync)
	}
	if s := c.Store; s != nil {
		if len(s.Drives) == 0 || s.BufferSize <= 0 {
			add("[store] needs drives and buffer_size")
		}
		if s.DriveSize < 0 || s.DriveSize%4096 != 0 {
			add("store.drive_size %d: want a multiple of 4096", s.DriveSize)
		}
		if s.GCPolicy != "" && s.GCPolicy != "greedy" && s.GCPolicy != "cost-benefit" {
			add("store.gc_policy %q: want cost-benefit or greedy", s.GCPolicy)
		}
		if s.Discard != "" && s.Discard != "auto" && s.Discard != "on" && s.Discard != "off" {
			add("store.discard %q: want auto, on or off", s.Discard)
		}
	}
	return errs
}

func validatePeers(cl *Cluster) []error {
	var errs []error
	ids := map[uint64]bool{}
	for i, p := range cl.Peers {
		where := fmt.Sprintf("cluster.peer[%d] (id %d)", i, p.ID)
		if p.ID < 1 || p.ID > MaxNodeID || ids[p.ID] {
			errs = append(errs, fmt.Errorf("%s: want a unique id 1..%d", where, MaxNodeID))
		}
		ids[p.ID] = true
		for what, a := range map[string]string{"raft": p.Raft, "nvme": p.NVMe, "api": p.API} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %q: %w", where, what, a, err))
			} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				errs = append(errs, fmt.Errorf("%s: %s %q: must be an address the others can reach, not a wildcard", where, what, a))
			}
		}
	}
	if !ids[cl.NodeID] {
		errs = append(errs, fmt.Errorf("cluster.peer: no entry for this node (id %d): list every node, this one included", cl.NodeID))
	}
	return errs
}

// AdoptJoin makes c the configuration of node id of a cluster it joined:
// its ID, port ID and controller-ID range, the cluster's UUID and its
// members as peers (this node among them, with its own addresses).
func (c *Config) AdoptJoin(id uint64, clusterID identity.ClusterUUID, peers []Peer) error {
	cl := c.Cluster
	if id < 1 || id > MaxNodeID {
		return fmt.Errorf("config: the cluster gave this node ID %d, outside 1..%d", id, MaxNodeID)
	}
	cl.NodeID, cl.InitialClusterID = id, clusterID
	cl.Peers = append([]Peer(nil), peers...)
	if c.NVMe.PortID == 0 {
		c.NVMe.PortID = uint16(id)
	}
	if c.NVMe.CNTLIDMin == 0 && c.NVMe.CNTLIDMax == 0 {
		c.NVMe.CNTLIDMin, c.NVMe.CNTLIDMax = CNTLIDRange(id)
	}
	if c.Node.Name == "" {
		c.Node.Name = fmt.Sprintf("node%d", id)
	}
	if errs := validatePeers(cl); len(errs) > 0 {
		return fmt.Errorf("config: the members the cluster named: %w", errors.Join(errs...))
	}
	return nil
}
