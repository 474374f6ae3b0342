package meta

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"basalt/pkg/identity"
)

func TestIdentitySurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, ok, err := db.Identity(); ok || err != nil {
		t.Fatalf("fresh DB: ok %v err %v", ok, err)
	}
	s := identity.Stamp{Cluster: identity.NewClusterUUID(), Node: identity.NewNodeUUID()}
	if err := db.Update(func(tx *Tx) error { return tx.PutIdentity(identity.Stamp{Node: s.Node}) }); err == nil {
		t.Error("a stamp without its cluster UUID was written")
	}
	if err := db.Update(func(tx *Tx) error { return tx.PutIdentity(s) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if got, ok, err := db.Identity(); !ok || err != nil || got != s {
		t.Fatalf("after reopen: %v ok %v err %v, want %v", got, ok, err, s)
	}
}

func TestIdentityMalformedIsCorrupt(t *testing.T) {
	db := openTest(t, "")
	defer db.Close()
	for _, v := range []string{`{"cluster_uuid": "nope"}`, `{"node_uuid": "6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a1"}`} {
		if err := db.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyIdentity), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.Identity(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", v, err)
		}
	}
}

// TestNodeInfoClusterUUID: the store's record carries its cluster's UUID as
// text, and a record written before it (no field) reads as zero.
func TestNodeInfoClusterUUID(t *testing.T) {
	c := identity.NewClusterUUID()
	b, err := json.Marshal(NodeInfo{FormatVersion: FormatVersion, ClusterUUID: c})
	if err != nil || !strings.Contains(string(b), `"cluster_uuid":"`+c.String()+`"`) {
		t.Fatalf("%s %v", b, err)
	}
	b, _ = json.Marshal(NodeInfo{FormatVersion: FormatVersion})
	if strings.Contains(string(b), "cluster_uuid") {
		t.Errorf("a node without a cluster writes %s", b)
	}
	var old NodeInfo
	if err := json.Unmarshal([]byte(`{"format_version": 1, "drives": 3}`), &old); err != nil || !old.ClusterUUID.IsZero() {
		t.Errorf("an old record: %+v %v", old, err)
	}
}
