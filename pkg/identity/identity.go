// Package identity names a cluster and each of its nodes for all time:
// random 128-bit UUIDs that a node stamps into every store of its state (its
// Raft log, its metadata, its store's drives), so that it starts only on
// state that is its own (pkg/node, "identity").
//
// A ClusterUUID is chosen once, by the administrator, and given to every
// initial member (config cluster.initial_cluster_id); a NodeUUID is drawn
// by the node when it bootstraps. Both print, parse and travel as text
// (TOML, JSON) in the canonical 8-4-4-4-12 hexadecimal form.
package identity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrMalformed: the text is not a canonical UUID, or is the zero UUID.
var ErrMalformed = errors.New("identity: malformed UUID")

// ClusterUUID names a cluster. The zero value means unknown or unset.
type ClusterUUID [16]byte

// NodeUUID names one node of a cluster: it does not change when the node's
// ID, name or addresses do. The zero value means unknown or unset.
type NodeUUID [16]byte

// NewClusterUUID returns a random (version 4) cluster UUID.
func NewClusterUUID() ClusterUUID { return ClusterUUID(newUUID()) }

// NewNodeUUID returns a random (version 4) node UUID.
func NewNodeUUID() NodeUUID { return NodeUUID(newUUID()) }

// ParseClusterUUID parses the canonical form; the zero UUID is refused.
func ParseClusterUUID(s string) (ClusterUUID, error) {
	u, err := parse("cluster", s)
	return ClusterUUID(u), err
}

// ParseNodeUUID parses the canonical form; the zero UUID is refused.
func ParseNodeUUID(s string) (NodeUUID, error) {
	u, err := parse("node", s)
	return NodeUUID(u), err
}

// String returns the canonical lower-case form.
func (u ClusterUUID) String() string { return Format(u) }

// String returns the canonical lower-case form.
func (u NodeUUID) String() string { return Format(u) }

// IsZero reports whether u is unset.
func (u ClusterUUID) IsZero() bool { return u == ClusterUUID{} }

// IsZero reports whether u is unset.
func (u NodeUUID) IsZero() bool { return u == NodeUUID{} }

// MarshalText implements encoding.TextMarshaler; the zero UUID is empty
// text.
func (u ClusterUUID) MarshalText() ([]byte, error) { return marshal(u), nil }

// MarshalText implements encoding.TextMarshaler; the zero UUID is empty
// text.
func (u NodeUUID) MarshalText() ([]byte, error) { return marshal(u), nil }

// UnmarshalText implements encoding.TextUnmarshaler: ParseClusterUUID, and
// empty text for the zero (unset) UUID.
func (u *ClusterUUID) UnmarshalText(b []byte) error {
	v, err := unmarshal("cluster", b)
	*u = ClusterUUID(v)
	return err
}

// UnmarshalText implements encoding.TextUnmarshaler: ParseNodeUUID, and
// empty text for the zero (unset) UUID.
func (u *NodeUUID) UnmarshalText(b []byte) error {
	v, err := unmarshal("node", b)
	*u = NodeUUID(v)
	return err
}

func marshal(u [16]byte) []byte {
	if u == ([16]byte{}) {
		return []byte{}
	}
	return []byte(Format(u))
}

func unmarshal(what string, b []byte) ([16]byte, error) {
	if len(b) == 0 {
		return [16]byte{}, nil
	}
	return parse(what, string(b))
}

// Stamp is what every store of a node's state carries: the cluster it
// belongs to and the node it belongs to.
type Stamp struct {
	Cluster ClusterUUID `json:"cluster_uuid"`
	Node    NodeUUID    `json:"node_uuid"`
}

// IsZero reports whether s carries neither UUID.
func (s Stamp) IsZero() bool { return s.Cluster.IsZero() && s.Node.IsZero() }

// Complete reports whether s carries both UUIDs.
func (s Stamp) Complete() bool { return !s.Cluster.IsZero() && !s.Node.IsZero() }

// String is "cluster <uuid> node <uuid>", "?" for an unknown part.
func (s Stamp) String() string {
	c, n := "?", "?"
	if !s.Cluster.IsZero() {
		c = s.Cluster.String()
	}
	if !s.Node.IsZero() {
		n = s.Node.String()
	}
	return "cluster " + c + " node " + n
}

func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails (Go 1.24+)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

func parse(what, s string) ([16]byte, error) {
	var u [16]byte
	bad := fmt.Errorf("%w: %s UUID %q: want 36 characters like 6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a1 (uuidgen makes one)",
		ErrMalformed, what, s)
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, bad
	}
	digits := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return [16]byte{}, bad
	}
	if u == ([16]byte{}) {
		return u, fmt.Errorf("%w: %s UUID %q: the zero UUID means unset", ErrMalformed, what, s)
	}
	return u, nil
}

// Format returns u in the canonical lower-case 8-4-4-4-12 form (pkg/disk
// prints its drive UUIDs with it too).
func Format(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}
