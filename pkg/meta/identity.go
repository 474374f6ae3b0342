package meta

import (
	"fmt"

	"basalt/pkg/identity"
)

// The node's identity stamp (pkg/identity) shares the DB under its own key,
// written once when the node is bootstrapped (or when it adopts the state
// it had before stamps existed), read at every start and compared with the
// stamps of the Raft log and the drives:
//
//	key          value
//	-----------  ------------------------------------------------------
//	"identity"   identity.Stamp, JSON: {"cluster_uuid": "<uuid>",
//	             "node_uuid": "<uuid>"}, both in the canonical 8-4-4-4-12
//	             form
const keyIdentity = "identity"

// PutIdentity writes the node's identity stamp, which must carry both UUIDs.
func (tx *Tx) PutIdentity(s identity.Stamp) error {
	if !s.Complete() {
		return fmt.Errorf("meta: identity %v lacks a UUID", s)
	}
	return tx.putJSON([]byte(keyIdentity), s)
}

// Identity returns the node's identity stamp; ok is false if none was ever
// written.
func (d *DB) Identity() (s identity.Stamp, ok bool, err error) {
	ok, err = d.getJSON([]byte(keyIdentity), &s)
	if err == nil && ok && !s.Complete() {
		return s, ok, fmt.Errorf("%w: %q: %v lacks a UUID", ErrCorrupt, keyIdentity, s)
	}
	return s, ok, err
}
