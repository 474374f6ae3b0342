package meta

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Cluster metadata (pkg/cluster) shares the node's DB under its own keys:
//
//	key                 value
//	------------------  ------------------------------------------------
//	"cluster/state"     the cluster state machine's record: the applied
//	                    Raft index and the whole state, encoded by
//	                    pkg/cluster (opaque here; JSON, see pkg/cluster
//	                    doc.go)
//
// The record is small (nodes and at most a few hundred volumes) and written
// whole, in one synced transaction per applied metadata command, so the
// state and its applied index can never disagree after a crash.
const keyClusterState = "cluster/state"

// PutClusterState writes the cluster state record.
func (tx *Tx) PutClusterState(record []byte) error {
	return tx.txn.Set([]byte(keyClusterState), append([]byte(nil), record...))
}

// ClusterState returns the cluster state record; ok is false if none was
// ever written.
func (d *DB) ClusterState() (record []byte, ok bool, err error) {
	err = d.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyClusterState))
		if err != nil {
			return err
		}
		record, err = item.ValueCopy(nil)
		return err
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("meta: while reading %q: %w", keyClusterState, err)
	}
	return record, true, nil
}
