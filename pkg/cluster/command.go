package cluster

import (
	"encoding/json"
	"fmt"
	"slices"

	"basalt/pkg/qos"
)

// Op names a metadata command.
type Op string

// The metadata commands. Each is applied deterministically on every node:
// whatever depends on time or randomness (UUIDs, the creation time) is
// chosen by the node that builds the command and travels inside it.
const (
	OpRegisterNode Op = "register_node" // Node: add or update a node's addresses
	OpCreateVolume Op = "create_volume" // Create
	OpDeleteVolume Op = "delete_volume" // Volume
	OpResizeVolume Op = "resize_volume" // Volume, Size
	OpAddHost      Op = "add_host"      // Volume, Host, Secrets
	OpRemoveHost   Op = "remove_host"   // Volume, Host
	// OpSetAllowAnyHost (Volume, Allow) opens the volume to every host
	// that reaches a node's NVMe port, or closes it to all but its Hosts.
	OpSetAllowAnyHost Op = "set_allow_any_host"
	OpReplicaGrown    Op = "replica_grown" // Volume, ID, NodeID, Size
)

// Command is one metadata change, JSON-encoded in a Raft entry.
type Command struct {
	Op Op `json:"op"`
	// Request identifies the proposal so that the proposing node can
	// collect its result; 0 when nobody waits.
	Request uint64        `json:"req,omitempty"`
	Node    *Node         `json:"node,omitempty"`
	Create  *CreateVolume `json:"create,omitempty"`
	Volume  string        `json:"volume,omitempty"`
	ID      GroupID       `json:"id,omitempty"`
	NodeID  NodeID        `json:"node_id,omitempty"`
	Size    int64         `json:"size,omitempty"`
	Host    string        `json:"host,omitempty"`
	// Secrets are the host's credentials for OpAddHost, replacing any it
	// had (nil: none). They make the Raft entry a secret too.
	Secrets *HostSecrets `json:"secrets,omitempty"`
	// Allow is OpSetAllowAnyHost's setting.
	Allow *bool `json:"allow,omitempty"`
	// QoS is OpSetQoS's change (command_qos.go).
	QoS *QoSChange `json:"qos,omitempty"`
	// Rewrap is OpRewrapKeys's new wrappings (encryption.go).
	Rewrap []Rewrap `json:"rewrap,omitempty"`
	// Nodes, Learners and State are the membership commands' fields
	// (command_members.go).
	Nodes    []NodeID `json:"nodes,omitempty"`
	Learners []NodeID `json:"learners,omitempty"`
	State    string   `json:"state,omitempty"`
}

// CreateVolume is the body of OpCreateVolume.
type CreateVolume struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// RF is the replication factor, 1..MaxReplicationFactor.
	RF int `json:"rf"`
	// Hosts may connect; AllowAnyHost lets every host that reaches a
	// node's NVMe port connect. Neither: nobody, until a host is added.
	Hosts        []string `json:"hosts,omitempty"`
	AllowAnyHost bool     `json:"allow_any_host"`
	UUID         ID16     `json:"uuid"`
	NGUID        ID16     `json:"nguid"`
	Created      string   `json:"created"`
	// QoS are the volume's I/O limits (command_qos.go); zero: none.
	QoS qos.Limits `json:"qos,omitzero"`
	// Compression: "lz4", "zstd", or empty for none (compression.go).
	Compression string `json:"compression,omitempty"`
	// Encryption, KEK and WrappedKey: the volume's encryption at rest
	// (encryption.go); the data key travels only wrapped.
	Encryption string `json:"encryption,omitempty"`
	KEK        string `json:"kek,omitempty"`
	WrappedKey []byte `json:"wrapped_key,omitempty"`
}

// Result is what applying a command produced, returned to its proposer.
type Result struct {
	// Volume is the volume after the command (create, resize, hosts).
	Volume *Volume `json:"volume,omitempty"`
	// Node is the node after OpRegisterNode.
	Node *Node `json:"node,omitempty"`
	// Note is a remark for the administrator ("no host can connect now").
	Note string `json:"note,omitempty"`
}

// Encode returns the command's Raft entry data.
func (c *Command) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCommand parses a Raft entry.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: command: %w", ErrCorrupt, err)
	}
	return c, nil
}

// Validate checks what can be checked without the state, so that a node
// can refuse a bad request before proposing it.
func (c *Command) Validate() error {
	switch c.Op {
	case OpRegisterNode:
		if c.Node == nil || c.Node.ID == 0 {
			return fmt.Errorf("%w: register_node without a node", ErrInvalid)
		}
	case OpCreateVolume:
		cv := c.Create
		if cv == nil {
			return fmt.Errorf("%w: create_volume without a body", ErrInvalid)
		}
		if err := ValidateVolumeName(cv.Name); err != nil {
			return err
		}
		if err := ValidateCompression(cv.Compression); err != nil {
			return err
		}
		if err := ValidateSize(cv.Size); err != nil {
			return err
		}
		if cv.RF < 1 || cv.RF > MaxReplicationFactor {
			return fmt.Errorf("%w: replication factor %d: want 1..%d", ErrInvalid, cv.RF, MaxReplicationFactor)
		}
		for _, h := range cv.Hosts {
			if err := ValidateHostNQN(h); err != nil {
				return err
			}
		}
		if err := ValidateEncryption(cv); err != nil {
			return err
		}
		return ValidateQoS(cv.QoS)
	case OpRewrapKeys:
		return validateRewrap(c.Rewrap)
	case OpSetQoS:
		return c.validateQoS()
	case OpDeleteVolume, OpReplicaGrown:
		return ValidateVolumeName(c.Volume)
	case OpResizeVolume:
		if err := ValidateVolumeName(c.Volume); err != nil {
			return err
		}
		return ValidateSize(c.Size)
	case OpAddHost, OpRemoveHost:
		if err := ValidateVolumeName(c.Volume); err != nil {
			return err
		}
		if err := ValidateHostNQN(c.Host); err != nil {
			return err
		}
		if c.Secrets != nil {
			return c.Secrets.Validate()
		}
	case OpSetAllowAnyHost:
		if c.Allow == nil {
			return fmt.Errorf("%w: set_allow_any_host without allow", ErrInvalid)
		}
		return ValidateVolumeName(c.Volume)
	default:
		return c.validateMembers()
	}
	return nil
}

// apply applies c to s (a private copy) and returns the result, or an
// error that leaves s unchanged in meaning (the caller discards s).
func (s *State) apply(c *Command) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	if isMemberOp(c.Op) {
		return s.applyMembers(c)
	}
	switch c.Op {
	case OpRegisterNode:
		return s.registerNode(c.Node)
	case OpCreateVolume:
		return s.createVolume(c.Create)
	case OpRewrapKeys:
		return s.rewrapKeys(c.Rewrap)
	case OpDeleteVolume:
		if s.Volumes[c.Volume] == nil {
			return Result{}, fmt.Errorf("%w: volume %q", ErrNotFound, c.Volume)
		}
		delete(s.Volumes, c.Volume)
		return Result{}, nil
	}
	v := s.Volumes[c.Volume]
	if v == nil {
		return Result{}, fmt.Errorf("%w: volume %q", ErrNotFound, c.Volume)
	}
	var note string
	switch c.Op {
	case OpResizeVolume:
		if err := v.resize(c.Size); err != nil {
			return Result{}, err
		}
	case OpReplicaGrown:
		v.replicaGrown(c.ID, c.NodeID, c.Size)
	case OpSetQoS:
		v.QoS = c.QoS.Apply(v.QoS)
	case OpAddHost:
		note = v.addHost(c.Host, c.Secrets)
	case OpRemoveHost:
		i := slices.Index(v.Hosts, c.Host)
		if i < 0 {
			return Result{}, fmt.Errorf("%w: host %q is not allowed on volume %q", ErrNotFound, c.Host, c.Volume)
		}
		v.Hosts = slices.Delete(v.Hosts, i, i+1)
		delete(v.Secrets, c.Host)
		if len(v.Hosts) == 0 && !v.AllowAnyHost {
			note = "no host can connect to this volume now; allow one with: basaltctl host add " + v.Name + " NQN"
		}
	case OpSetAllowAnyHost:
		v.AllowAnyHost = *c.Allow
		if !v.AllowAnyHost && len(v.Hosts) == 0 {
			note = "no host can connect to this volume now; allow one with: basaltctl host add " + v.Name + " NQN"
		}
	}
	return Result{Volume: v.Public(), Note: note}, nil
}

// addHost lists host on v with the credentials sec (nil: none), replacing
// what it had, and returns a note for the administrator.
func (v *Volume) addHost(host string, sec *HostSecrets) string {
	if !slices.Contains(v.Hosts, host) {
		v.Hosts = append(v.Hosts, host)
		slices.Sort(v.Hosts)
	}
	if sec == nil || sec.IsZero() {
		delete(v.Secrets, host)
	} else {
		if v.Secrets == nil {
			v.Secrets = map[string]HostSecrets{}
		}
		v.Secrets[host] = *sec
	}
	if v.AllowAnyHost {
		return "the volume still admits any host (allow_any_host); admit only its listed hosts with: " +
			"basaltctl volume set " + v.Name + " --allow-any-host=false"
	}
	return ""
}

func (s *State) createVolume(cv *CreateVolume) (Result, error) {
	if s.Volumes[cv.Name] != nil {
		return Result{}, fmt.Errorf("%w: volume %q", ErrExists, cv.Name)
	}
	replicas, err := s.place(cv.RF, s.NextGroup)
	if err != nil {
		return Result{}, err
	}
	ana, err := s.freeANAGroup()
	if err != nil {
		return Result{}, err
	}
	v := &Volume{
		Name: cv.Name, ID: s.NextGroup, UUID: cv.UUID, NGUID: cv.NGUID, Size: cv.Size, BlockSize: BlockSize,
		Replicas: replicas, AllowAnyHost: cv.AllowAnyHost, ANAGroup: ana,
		State: VolumeActive, Created: cv.Created, QoS: cv.QoS, Compression: cv.Compression,
		Encryption: cv.Encryption, KEK: cv.KEK, WrappedKey: cv.WrappedKey,
	}
	v.Hosts = slices.Clone(cv.Hosts)
	slices.Sort(v.Hosts)
	v.Hosts = slices.Compact(v.Hosts)
	s.NextGroup++
	s.Volumes[v.Name] = v
	return Result{Volume: v.Public()}, nil
}

// place chooses rf nodes for a new volume (placement.go).
func (s *State) place(rf int, id GroupID) ([]NodeID, error) {
	out, err := s.pick(rf, id, nil, nil)
	if err != nil {
		serving := 0
		for _, n := range s.Nodes {
			if n.Serves() {
				serving++
			}
		}
		return nil, fmt.Errorf("replication factor %d needs %d nodes, %d registered take replicas: %w", rf, rf, serving, err)
	}
	slices.Sort(out)
	return out, nil
}

// freeANAGroup returns the smallest ANA group ID no volume uses.
func (s *State) freeANAGroup() (uint32, error) {
	used := make([]bool, MaxANAGroups+1)
	for _, v := range s.Volumes {
		if v.ANAGroup <= MaxANAGroups {
			used[v.ANAGroup] = true
		}
	}
	for g := uint32(1); g <= MaxANAGroups; g++ {
		if !used[g] {
			return g, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d ANA groups are in use (one per volume): delete a volume first", ErrNoCapacity, MaxANAGroups)
}

// resize starts growing the volume to size; hosts see the new size once
// every replica has grown (replicaGrown).
func (v *Volume) resize(size int64) error {
	switch cur := max(v.Size, v.PendingSize); {
	case size < v.Size:
		return fmt.Errorf("%w: volume %q is %d bytes; shrinking to %d would destroy data", ErrShrinkVolume, v.Name, v.Size, size)
	case size == cur:
		return nil
	case size < cur:
		return fmt.Errorf("%w: volume %q is already growing to %d bytes", ErrShrinkVolume, v.Name, cur)
	}
	v.PendingSize = size
	v.maybeFinishResize()
	return nil
}

// replicaGrown records that node's replica of the volume holds size bytes.
func (v *Volume) replicaGrown(id GroupID, node NodeID, size int64) {
	if id != v.ID || !v.HasReplica(node) {
		return // a report about an older volume of the same name, or a stranger
	}
	if v.ReplicaSizes == nil {
		v.ReplicaSizes = map[NodeID]int64{}
	}
	v.ReplicaSizes[node] = max(v.ReplicaSizes[node], size)
	v.maybeFinishResize()
}

func (v *Volume) maybeFinishResize() {
	if v.PendingSize <= v.Size {
		return
	}
	for _, r := range v.Replicas {
		if v.ReplicaSizes[r] < v.PendingSize {
			return
		}
	}
	v.Size, v.PendingSize = v.PendingSize, 0
}
