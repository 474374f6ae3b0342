package cluster

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"basalt/pkg/qos"
)

// NodeID names a node of the cluster (1..config.MaxNodeID); it is also the
// node's NVMe port ID.
type NodeID uint64

func (id NodeID) String() string { return "node" + strconv.FormatUint(uint64(id), 10) }

// GroupID names a Raft group: MetadataGroup, or a volume's group (IDs are
// never reused; 0 is none).
type GroupID uint64

func (id GroupID) String() string { return "group" + strconv.FormatUint(uint64(id), 10) }

// MetadataGroup is the Raft group of the cluster metadata; every node is a
// member. Volumes get the IDs after it.
const MetadataGroup GroupID = 1

// Limits and defaults.
const (
	// MaxANAGroups is the number of ANA group IDs (1..MaxANAGroups), one
	// per volume and unique in the cluster, so it caps the volumes: the
	// target's ANAGRPMAX (target.DefaultMaxANAGroupID). A controller's ANA
	// log lists only its subsystem's group, so the IDs' range does not
	// grow the log.
	MaxANAGroups = 0xFFFF
	// DefaultReplicationFactor is used when a create request gives none.
	DefaultReplicationFactor = 3
	// MaxReplicationFactor is the most replicas a volume may have.
	MaxReplicationFactor = 3
	// BlockSize is the logical block size of every volume.
	BlockSize = 4096
	// NQNPrefix is the subsystem NQN of volume v: NQNPrefix + v.
	NQNPrefix = "nqn.2026-11.io.basalt:"
	// MaxVolumeSize bounds a volume (the store maps up to 2^40 blocks).
	MaxVolumeSize = 1 << 52
)

// Errors. Validation errors wrap ErrInvalid; the API maps each class to an
// HTTP status.
var (
	ErrInvalid      = errors.New("cluster: invalid request")
	ErrNotFound     = errors.New("cluster: not found")
	ErrExists       = errors.New("cluster: already exists")
	ErrNoCapacity   = errors.New("cluster: not enough nodes or ANA groups")
	ErrNotLeader    = errors.New("cluster: this node does not lead the metadata group")
	ErrNoLeader     = errors.New("cluster: no metadata leader (a majority of nodes must be up)")
	ErrClosed       = errors.New("cluster: closed")
	ErrCorrupt      = errors.New("cluster: corrupt metadata record")
	ErrUnsupported  = errors.New("cluster: not supported by this replica backend")
	ErrShrinkVolume = errors.New("cluster: volumes only grow")
)

// ID16 is a 16-byte identifier (UUID, NGUID) written as 32 hex digits in
// JSON (a UUID with dashes is accepted).
type ID16 [16]byte

// MarshalText implements encoding.TextMarshaler.
func (id ID16) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(id[:])), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID16) UnmarshalText(b []byte) error {
	s := strings.ReplaceAll(string(b), "-", "")
	if len(s) != 32 {
		return fmt.Errorf("%w: id %q: want 32 hex digits", ErrInvalid, b)
	}
	_, err := hex.Decode(id[:], []byte(s))
	if err != nil {
		return fmt.Errorf("%w: id %q: %w", ErrInvalid, b, err)
	}
	return nil
}

// UUIDString formats id as a UUID (8-4-4-4-12).
func (id ID16) UUIDString() string {
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Node is a member of the cluster as the metadata records it.
type Node struct {
	ID   NodeID `json:"id"`
	Name string `json:"name"`
	// NVMeAddr is the advertised NVMe/TCP address (host:port).
	NVMeAddr string `json:"nvme_addr"`
	// NVMeTLS is the port's TLS mode ("optional", "required", "none";
	// empty: optional), for the discovery log entries of other nodes.
	NVMeTLS  string `json:"nvme_tls,omitempty"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	// State is the administrative state (NodeActive, NodeMaintenance,
	// NodeDraining, NodeOut).
	State string `json:"state"`
	// Zone is the node's failure domain: a volume's replicas go to
	// distinct zones when the cluster has enough of them. Empty is a zone
	// of its own per node.
	Zone string `json:"zone,omitempty"`
	// Capacity is the bytes of volume data the node can hold (its store's
	// usable space; 0: unknown, placement then counts replicas only).
	Capacity int64 `json:"capacity,omitempty"`
}

// The administrative states of a node.
const (
	// NodeActive holds replicas, leads volumes and receives new replicas.
	NodeActive = "active"
	// NodeMaintenance keeps its replicas but leads nothing and gets no new
	// replicas, and is not marked out while it is down (a planned reboot).
	NodeMaintenance = "maintenance"
	// NodeDraining leads nothing and has every replica moved to other
	// nodes; once it holds none it can be removed.
	NodeDraining = "draining"
	// NodeOut was down longer than the down-out interval: its replicas
	// are replaced on other nodes. It becomes active again when it
	// returns and an administrator says so.
	NodeOut = "out"
)

// Serves reports whether the node may lead volumes and receive replicas.
func (n *Node) Serves() bool { return n.State == NodeActive || n.State == "" }

// Volume is a replicated volume.
type Volume struct {
	Name string  `json:"name"`
	ID   GroupID `json:"id"` // its Raft group
	// UUID and NGUID are identical on every node (the host merges paths).
	UUID  ID16 `json:"uuid"`
	NGUID ID16 `json:"nguid"`
	// Size is what hosts see, in bytes. PendingSize, when larger, is a
	// resize in progress: hosts see it once every replica has grown
	// (ReplicaSizes).
	Size         int64            `json:"size"`
	PendingSize  int64            `json:"pending_size,omitempty"`
	ReplicaSizes map[NodeID]int64 `json:"replica_sizes,omitempty"`
	BlockSize    int              `json:"block_size"`
	// Replicas are the voters of the volume's Raft group, as its leader
	// last reported them (the nodes holding a full copy).
	Replicas []NodeID `json:"replicas"`
	// Learners are nodes catching up as non-voting members of the group
	// (a replica being added).
	Learners []NodeID `json:"learners,omitempty"`
	// Want, when set, is the replica set the volume is being moved to
	// (healing, drain, replace, rebalance): the group's leader adds each
	// missing node as a learner, promotes it once it has caught up and
	// removes the voters not in Want, in one joint change.
	Want []NodeID `json:"want,omitempty"`
	// AllowAnyHost admits every host that reaches a node's NVMe port;
	// otherwise only Hosts (none: nobody). It is set only when asked for.
	AllowAnyHost bool     `json:"allow_any_host"`
	Hosts        []string `json:"hosts"`
	// Secrets are the credentials of allowed hosts, by host NQN (a host
	// without any has no entry). They are in the replicated metadata, so
	// every node holds them; API views never show them (Public).
	Secrets map[string]HostSecrets `json:"host_secrets,omitempty"`
	// HostAuth is set only on a copy without Secrets (Public): for every
	// listed host, the mechanisms its credentials configure
	// ("dh-hmac-chap (bidirectional), tls-psk", or "none").
	HostAuth map[string]string `json:"host_auth,omitempty"`
	// Encryption is the volume's encryption at rest ("": none, or
	// "aes-xts-256"); KEK the ID of the key-encryption key its data key is
	// wrapped under; WrappedKey that wrapping (package crypt), which API
	// views never show (Public). The data key itself is in no record.
	Encryption string `json:"encryption,omitempty"`
	KEK        string `json:"kek,omitempty"`
	WrappedKey []byte `json:"wrapped_key,omitempty"`
	// ANAGroup is the volume's ANA group ID, unique in the cluster.
	ANAGroup uint32 `json:"ana_group"`
	State    string `json:"state"`
	// Created is the time of the create request (RFC 3339, UTC).
	Created string `json:"created"`
	// QoS are the volume's I/O limits, enforced by its leader
	// (command_qos.go); zero: none.
	QoS qos.Limits `json:"qos,omitzero"`
	// Compression is how every replica's store packs the volume's blocks
	// ("lz4", "zstd"; empty: none), fixed at creation (compression.go).
	Compression string `json:"compression,omitempty"`
}

// VolumeActive is the state of a usable volume.
const VolumeActive = "active"

// NQN returns the volume's subsystem NQN.
func (v *Volume) NQN() string { return NQNPrefix + v.Name }

// HasReplica reports whether node n holds a replica or is to hold one: a
// voter, a learner, or a node in Want.
func (v *Volume) HasReplica(n NodeID) bool {
	return slices.Contains(v.Replicas, n) || slices.Contains(v.Learners, n) || slices.Contains(v.Want, n)
}

// IsVoter reports whether node n is a voter of the volume's group.
func (v *Volume) IsVoter(n NodeID) bool { return slices.Contains(v.Replicas, n) }

// LocalName is the name of the volume's replica in a node's local store:
// unique for all time, because group IDs are never reused.
func (v *Volume) LocalName() string { return fmt.Sprintf("v%d.%s", v.ID, v.Name) }

func (v *Volume) clone() *Volume {
	c := *v
	c.Replicas = slices.Clone(v.Replicas)
	c.Learners = slices.Clone(v.Learners)
	c.Want = slices.Clone(v.Want)
	c.Hosts = slices.Clone(v.Hosts)
	c.ReplicaSizes = maps.Clone(v.ReplicaSizes)
	c.Secrets = maps.Clone(v.Secrets)
	c.HostAuth = maps.Clone(v.HostAuth)
	c.WrappedKey = slices.Clone(v.WrappedKey)
	return &c
}

// State is the whole cluster metadata. A State handed out by Machine.State
// is never modified: Apply works on a copy.
type State struct {
	Nodes   map[NodeID]*Node   `json:"nodes"`
	Volumes map[string]*Volume `json:"volumes"`
	// NextGroup is the group ID the next volume gets.
	NextGroup GroupID `json:"next_group"`
	// NextNode is at least the ID the next joining node gets (IDs of
	// removed nodes are never reused); 0 before any node joined.
	NextNode NodeID `json:"next_node,omitempty"`
	// Removed are the nodes removed from the cluster: the metadata leader
	// takes them out of the metadata group, and they never come back.
	Removed []NodeID `json:"removed,omitempty"`
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Nodes: map[NodeID]*Node{}, Volumes: map[string]*Volume{}, NextGroup: MetadataGroup + 1}
}

func (s *State) clone() *State {
	c := &State{Nodes: make(map[NodeID]*Node, len(s.Nodes)), Volumes: make(map[string]*Volume, len(s.Volumes)),
		NextGroup: s.NextGroup, NextNode: s.NextNode, Removed: slices.Clone(s.Removed)}
	for id, n := range s.Nodes {
		nc := *n
		c.Nodes[id] = &nc
	}
	for name, v := range s.Volumes {
		c.Volumes[name] = v.clone()
	}
	return c
}

// NodeList returns the nodes in ID order.
func (s *State) NodeList() []*Node {
	out := slices.Collect(maps.Values(s.Nodes))
	slices.SortFunc(out, func(a, b *Node) int { return int(a.ID) - int(b.ID) })
	return out
}

// VolumeList returns the volumes in name order.
func (s *State) VolumeList() []*Volume {
	out := slices.Collect(maps.Values(s.Volumes))
	slices.SortFunc(out, func(a, b *Volume) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// VolumeByID returns the volume of group id, or nil.
func (s *State) VolumeByID(id GroupID) *Volume {
	for _, v := range s.Volumes {
		if v.ID == id {
			return v
		}
	}
	return nil
}

var volumeName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateVolumeName checks a volume name: 1-63 characters of a-z 0-9 . _ -,
// starting with a letter or digit (it becomes part of the NQN).
func ValidateVolumeName(name string) error {
	if !volumeName.MatchString(name) {
		return fmt.Errorf("%w: volume name %q: use 1-63 characters a-z 0-9 . _ - starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// ValidateHostNQN checks a host NQN.
func ValidateHostNQN(nqn string) error {
	if !strings.HasPrefix(nqn, "nqn.") || len(nqn) > 223 || strings.ContainsAny(nqn, " \t\n\x00/") {
		return fmt.Errorf("%w: host NQN %q: want nqn.… of at most 223 characters (see /etc/nvme/hostnqn on the host)", ErrInvalid, nqn)
	}
	return nil
}

// ValidateSize checks a volume size.
func ValidateSize(size int64) error {
	if size <= 0 || size%BlockSize != 0 || size > MaxVolumeSize {
		return fmt.Errorf("%w: size %d: want a positive multiple of %d bytes up to %d", ErrInvalid, size, BlockSize, int64(MaxVolumeSize))
	}
	return nil
}
