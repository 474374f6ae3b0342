package api

import (
	"basalt/pkg/crypt"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/qos"
)

// Size is a byte count; in JSON a number of bytes or a string like "4GiB".
type Size int64

// UnmarshalJSON implements json.Unmarshaler.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := config.ParseSize(str)
		if err != nil {
			return fmt.Errorf("%w: size %q: want bytes or a size like 4GiB or 512MiB", cluster.ErrInvalid, str)
		}
		*s = Size(v)
		return nil
	}
	var v int64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: size %s: want bytes or a size like \"4GiB\"", cluster.ErrInvalid, b)
	}
	*s = Size(v)
	return nil
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name string `json:"name"`
	Size Size   `json:"size"`
	// RF is the replication factor; 0 means cluster.DefaultReplicationFactor.
	RF int `json:"rf,omitempty"`
	// Hosts are the host NQNs allowed to connect; none admits nobody
	// until a host is added (POST /v1/volumes/{name}/hosts/{nqn}).
	Hosts []string `json:"hosts,omitempty"`
	// AllowAnyHost lets every host that can reach a node's NVMe port read
	// and write the volume, listed or not.
	AllowAnyHost bool `json:"allow_any_host,omitempty"`
	// QoS are the volume's I/O limits (qos.go); absent: none.
	QoS qos.Limits `json:"qos,omitzero"`
	// Compression is how the nodes' stores pack the volume's blocks:
	// "lz4", "zstd", or "none" (absent: none).
	Compression string `json:"compression,omitempty"`
	// Encryption is "aes-xts-256" or "none"/absent (encryption.go).
	Encryption string `json:"encryption,omitempty"`
}

// ResizeRequest is the body of POST /v1/volumes/{name}/resize.
type ResizeRequest struct {
	Size Size `json:"size"`
}

// ClusterView answers GET /v1/cluster.
type ClusterView struct {
	// Self is the node that answered.
	Self cluster.NodeID `json:"self"`
	// Leader is the metadata leader (0: none).
	Leader     cluster.NodeID `json:"leader"`
	LeaderName string         `json:"leader_name,omitempty"`
	Nodes      int            `json:"nodes"`
	NodesUp    int            `json:"nodes_up"`
	Volumes    int            `json:"volumes"`
	// VolumesHealthy counts volumes with a leader and every replica up.
	VolumesHealthy int `json:"volumes_healthy"`
	// VolumesRecovering and VolumesDegraded count volumes getting a
	// replica added (healing, drain, rebalance) and volumes with a replica
	// down or behind; the rest of the unhealthy ones have no leader.
	VolumesRecovering int `json:"volumes_recovering"`
	VolumesDegraded   int `json:"volumes_degraded"`
	// Applied is the metadata index this node has applied.
	Applied uint64 `json:"applied"`
	// Health is "healthy", "degraded" (some node or replica down) or
	// "unavailable" (no metadata leader).
	Health string `json:"health"`
	// Stale is set when this node could not confirm its metadata with the
	// leader: what it shows may be out of date.
	Stale bool `json:"stale,omitempty"`
	// Failed lists the replicas whose Raft group failed on their node (a
	// storage or state-machine error): fenced there, their path
	// inaccessible, until the volume is opened again on that node.
	Failed []FailedReplica `json:"failed,omitempty"`
}

// FailedReplica is a volume's replica whose group failed on its node.
type FailedReplica struct {
	Volume   string         `json:"volume"`
	Node     cluster.NodeID `json:"node"`
	NodeName string         `json:"node_name"`
	Reason   string         `json:"reason"`
}

// NodeView is one node in GET /v1/nodes.
type NodeView struct {
	cluster.Node
	// Up: the node's API answered just now.
	Up bool `json:"up"`
	// MetadataLeader: the node leads the metadata group.
	MetadataLeader bool `json:"metadata_leader"`
	// Replicas and Leading count the volumes it holds and leads.
	Replicas int    `json:"replicas"`
	Leading  int    `json:"leading"`
	Error    string `json:"error,omitempty"`
	// Scrub is the node's scrub schedule; absent for a node without a
	// store, or one that did not answer.
	Scrub *ScrubView `json:"scrub,omitempty"`
}

// LocalView answers GET /v1/local: the node's cluster.LocalStatus (its
// fields inline) and its scrub schedule.
type LocalView struct {
	cluster.LocalStatus
	Scrub *ScrubView `json:"scrub,omitempty"`
}

// ScrubView is a node's scrub schedule (store.ScrubStatus): every stripe
// of its store read, verified and repaired from parity once per Interval.
// Times are UTC and absent when zero.
type ScrubView struct {
	// Enabled is false with store.scrub_interval = "0".
	Enabled bool `json:"enabled"`
	// Interval is a Go duration ("168h0m0s").
	Interval           string `json:"interval"`
	RateBytesPerSecond int64  `json:"rate_bytes_per_second"`
	InProgress         bool   `json:"in_progress"`
	// Fraction of the pass in progress done, by segments (0..1).
	Fraction    float64   `json:"fraction"`
	PassStarted time.Time `json:"pass_started,omitzero"`
	// LastCompleted is absent if no pass ever completed.
	LastCompleted time.Time `json:"last_completed,omitzero"`
	// NextDue is when the next pass starts; absent while one runs or
	// when the schedule is off.
	NextDue time.Time `json:"next_due,omitzero"`
	// Last counts the last completed pass, Pass the one in progress so
	// far, Total everything since the node started.
	Last  ScrubCounts  `json:"last"`
	Pass  *ScrubCounts `json:"pass,omitempty"`
	Total ScrubCounts  `json:"total"`
}

// ScrubCounts count what a scrub found (store.ScrubCounts).
type ScrubCounts struct {
	Stripes  uint64 `json:"stripes"`
	Blocks   uint64 `json:"blocks"`
	Bad      uint64 `json:"bad"`
	Repaired uint64 `json:"repaired"`
	// Unrecoverable counts stripe rows (or summaries) beyond repair.
	Unrecoverable uint64 `json:"unrecoverable"`
}

// VolumeView answers GET /v1/volumes/{name} and the changes of a volume.
// It holds the volume without its hosts' secrets (cluster.Volume.Public):
// host_auth says per host which mechanisms are configured.
type VolumeView struct {
	cluster.Volume
	NQN string `json:"nqn"`
	// RF is len(Replicas).
	RF int `json:"rf"`
	// Leader is the node leading the volume's Raft group (0: none), where
	// its ANA state is optimized.
	Leader     cluster.NodeID `json:"leader"`
	LeaderName string         `json:"leader_name,omitempty"`
	// Health is "healthy", "recovering" (a replica being added),
	// "degraded" (a replica down, behind or failing; a path
	// whose group failed says why in Failed) or "unavailable" (no leader:
	// I/O waits).
	Health string `json:"health"`
	// HealthDetail says more: "2 of 3 replicas up to date" when degraded,
	// "41%, ETA 1m20s" while recovering (a replica being added: healing,
	// a drain, a replace).
	HealthDetail string `json:"health_detail,omitempty"`
	// Paths are the replicas as the hosts' paths, one per node.
	Paths   []PathView `json:"paths"`
	Connect Connect    `json:"connect"`

	// Note is a remark about the last change.
	Note string `json:"note,omitempty"`
}

// PathView is one node's path to a volume.
type PathView struct {
	Node     cluster.NodeID `json:"node"`
	Name     string         `json:"name"`
	NVMeAddr string         `json:"nvme_addr"`
	// ANAState is what the node's port reports: "optimized" on the
	// leader, "inaccessible" elsewhere; "unknown" if the node is down.
	ANAState    string `json:"ana_state"`
	Role        string `json:"role,omitempty"`
	Applied     uint64 `json:"applied"`
	Controllers int    `json:"controllers"`
	Error       string `json:"error,omitempty"`
	// Failed is why the volume's Raft group failed on this node, if it did
	// (Error then starts with "failed: ").
	Failed string `json:"failed,omitempty"`
	// Compression is the ratio the node's store achieved on the volume
	// since the node started, for a volume that compresses.
	Compression *cluster.CompressionStatus `json:"compression,omitempty"`
}

// Connect are the nvme-cli commands that attach a volume.
type Connect struct {
	Discover   string   `json:"discover"`
	ConnectAll string   `json:"connect_all"`
	Connect    []string `json:"connect"`
	Note       string   `json:"note,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	// Status is the HTTP status (not in the body).
	Status int `json:"-"`
	// Code classifies the error: invalid, not_found, exists, conflict,
	// no_capacity, not_leader, no_leader, unsupported, timeout, internal,
	// unauthenticated, forbidden (auth.go).
	Code    string `json:"code"`
	Message string `json:"error"`
	Hint    string `json:"hint,omitempty"`
}

func (e *Error) Error() string {
	if e.Hint != "" {
		return e.Message + " (" + e.Hint + ")"
	}
	return e.Message
}

// codes maps error classes to codes, statuses and sentinels.
var codes = []struct {
	code   string
	status int
	err    error
}{
	{"invalid", http.StatusBadRequest, cluster.ErrInvalid},
	{"not_found", http.StatusNotFound, cluster.ErrNotFound},
	{"exists", http.StatusConflict, cluster.ErrExists},
	{"conflict", http.StatusConflict, cluster.ErrShrinkVolume},
	{"no_capacity", http.StatusConflict, cluster.ErrNoCapacity},
	{"not_leader", http.StatusServiceUnavailable, cluster.ErrNotLeader},
	{"no_leader", http.StatusServiceUnavailable, cluster.ErrNoLeader},
	{"unsupported", http.StatusNotImplemented, cluster.ErrUnsupported},
	{"refused", http.StatusConflict, cluster.ErrRefused},
	{"no_replica_here", http.StatusNotFound, cluster.ErrNoReplicaHere},
	{"not_volume_leader", http.StatusServiceUnavailable, cluster.ErrNotVolumeLeader},
	{"unauthenticated", http.StatusUnauthorized, ErrUnauthenticated},
	{"forbidden", http.StatusForbidden, ErrForbidden},
	{"no_kek", http.StatusConflict, crypt.ErrNoKEK},
	{"unwrap", http.StatusConflict, crypt.ErrUnwrap},
}

// Unwrap returns the cluster sentinel of the error's code, so that
// errors.Is works across the API.
func (e *Error) Unwrap() error {
	for _, c := range codes {
		if c.code == e.Code {
			return c.err
		}
	}
	return nil
}

// errorFor classifies err.
func errorFor(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return &Error{Status: c.status, Code: c.code, Message: err.Error(), Hint: hintFor(c.code)}
		}
	}
	if errors.Is(err, errTimeout) {
		return &Error{Status: http.StatusGatewayTimeout, Code: "timeout", Message: err.Error(),
			Hint: "the cluster did not answer in time; check basaltctl node list and retry"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error(),
		Hint: "see the node's log for details"}
}

var errTimeout = errors.New("api: timed out")

func hintFor(code string) string {
	switch code {
	case "invalid":
		return "check the request; sizes look like 4GiB, 512MiB or a byte count that is a multiple of 4096"
	case "not_found":
		return "list what exists with: basaltctl volume list"
	case "exists":
		return "choose another name, or use the existing one: basaltctl volume show NAME"
	case "conflict":
		return "volumes only grow: give a size at least the current one"
	case "no_capacity":
		return "use a smaller --rf, add nodes, or delete a volume"
	case "not_leader", "no_leader":
		return "a majority of the nodes must be up and reachable; check basaltctl node list, then retry"
	case "not_volume_leader":
		return "the volume's replicas are starting or electing a leader; check basaltctl volume show NAME, then retry"
	case "unsupported":
		return "this node's replica backend cannot do that yet"
	}
	return ""
}

// decodeStrict parses a JSON body and refuses unknown fields and
// trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", cluster.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body: trailing data after the JSON object", cluster.ErrInvalid)
	}
	return nil
}
