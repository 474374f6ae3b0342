package node

import (
	"errors"
	"strings"
	"testing"

	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/store"
	"basalt/replication"
)

// TestDecide runs the identity rules (identity.go) on every kind of state,
// with no I/O: what is refused, with which error and naming what, and what
// is stamped.
func TestDecide(t *testing.T) {
	cid, nid := identity.NewClusterUUID(), identity.NewNodeUUID()
	mine := identity.Stamp{Cluster: cid, Node: nid}
	other := identity.Stamp{Cluster: cid, Node: identity.NewNodeUUID()}
	alien := identity.Stamp{Cluster: identity.NewClusterUUID(), Node: identity.NewNodeUUID()}
	oldStoreNode := identity.NewNodeUUID()

	// base is a healthy node's state: every stamp, the log with its metadata
	// group compacted to 100, the metadata applied to 150.
	base := func() *nodeState {
		return &nodeState{logPath: "/shm/n1.raft", metaDir: "/data/meta", drivePaths: []string{"/d0", "/d1"},
			removable: []string{"/data/meta", "/d0", "/d1", "/shm/n1.raft"},
			logStamp:  mine, logStamped: true, logGroups: 2, logHasMeta: true,
			logMeta:   replication.LogBounds{SnapIndex: 100, LastIndex: 160},
			metaStamp: mine, metaStamped: true, metaHas: true, applied: 150,
			store: &store.Identity{Formatted: true, Stamp: mine,
				Drives: []store.DriveIdentity{{Formatted: true, Node: nid}, {Formatted: true, Node: nid}}}}
	}
	emptyLog := func(st *nodeState) {
		st.logStamp, st.logStamped, st.logGroups, st.logHasMeta, st.logMeta = identity.Stamp{}, false, 0, false, replication.LogBounds{}
	}
	empty := func(st *nodeState) {
		emptyLog(st)
		st.metaStamp, st.metaStamped, st.metaHas, st.applied = identity.Stamp{}, false, false, 0
		st.store = &store.Identity{Drives: []store.DriveIdentity{{}, {}}}
	}
	unstamped := func(st *nodeState) {
		st.logStamp, st.logStamped, st.metaStamp, st.metaStamped = identity.Stamp{}, false, identity.Stamp{}, false
		st.store.Stamp = identity.Stamp{Node: oldStoreNode}
		for i := range st.store.Drives {
			st.store.Drives[i].Node = oldStoreNode
		}
	}
	tests := []struct {
		name      string
		edit      func(*nodeState)
		bootstrap bool
		initial   identity.ClusterUUID
		err       error
		words     []string // in the error
		want      plan     // without an error; a zero Node: any new one
	}{
		{name: "intact", edit: func(*nodeState) {}, want: plan{stamp: mine}},
		{name: "intact, bootstrap set", edit: func(*nodeState) {}, bootstrap: true, initial: cid, want: plan{stamp: mine}},
		{name: "lost log", edit: emptyLog, bootstrap: true, initial: cid, err: ErrLostRaftState,
			words: []string{"the Raft log /shm/n1.raft is empty or missing", "the metadata in /data/meta belongs to cluster " + cid.String() +
				" node " + nid.String() + " (applied index 150)", "Do not bootstrap over it", "skip the entries up to index 150",
				"remove /data/meta, /d0, /d1, /shm/n1.raft", "node replace, not yet available"}},
		{name: "lost log, no bootstrap", edit: emptyLog, err: ErrLostRaftState},
		{name: "lost log of an unstamped node", edit: func(st *nodeState) { unstamped(st); emptyLog(st) }, bootstrap: true,
			initial: cid, err: ErrLostRaftState, words: []string{"belongs to node " + oldStoreNode.String() + " (from before identity stamps"}},
		{name: "lost log, only the drives left", edit: func(st *nodeState) {
			emptyLog(st)
			st.metaStamp, st.metaStamped, st.metaHas, st.applied = identity.Stamp{}, false, false, 0
			st.store.Formatted, st.store.Stamp = false, identity.Stamp{}
		}, bootstrap: true, initial: cid, err: ErrLostRaftState, words: []string{"the drives /d0, /d1 hold the state of node " + nid.String() + ". Do not"}},
		{name: "log stamped but without groups, metadata applied", edit: func(st *nodeState) {
			st.logGroups, st.logHasMeta = 0, false
		}, err: ErrLostRaftState},
		{name: "log without the metadata group", edit: func(st *nodeState) { st.logHasMeta = false }, err: ErrForeignState,
			words: []string{"holds 2 groups but not the metadata group"}},
		{name: "another node's log", edit: func(st *nodeState) { st.logStamp = other }, err: ErrForeignState,
			words: []string{"the Raft log /shm/n1.raft belongs to node " + other.Node.String(),
				"but the metadata in /data/meta to node " + nid.String()}},
		{name: "another cluster's log", edit: func(st *nodeState) { st.logStamp = alien }, err: ErrForeignState,
			words: []string{"belongs to cluster " + alien.Cluster.String(), "to cluster " + cid.String()}},
		{name: "another node's drive", edit: func(st *nodeState) { st.store.Drives[1].Node = other.Node }, err: ErrForeignState,
			words: []string{"the drive /d1 to node " + other.Node.String()}},
		{name: "another cluster's state", edit: func(*nodeState) {}, initial: alien.Cluster, err: ErrForeignState,
			words: []string{"cluster.initial_cluster_id is " + alien.Cluster.String(), "the Raft log /shm/n1.raft belongs to cluster " + cid.String()}},
		{name: "metadata lost", edit: func(st *nodeState) {
			st.metaStamp, st.metaStamped, st.metaHas, st.applied = identity.Stamp{}, false, false, 0
		}, err: ErrLostMetadata, words: []string{"from index 101 to 160", "the metadata in /data/meta is empty"}},
		{name: "metadata older than the log", edit: func(st *nodeState) { st.applied = 99 }, err: ErrLostMetadata,
			words: []string{"has applied only up to index 99"}},
		{name: "metadata lost right after bootstrap", edit: func(st *nodeState) {
			st.metaStamp, st.metaStamped, st.metaHas, st.applied = identity.Stamp{}, false, false, 0
			st.logMeta = replication.LogBounds{SnapIndex: 1, LastIndex: 3}
			st.store = nil
		}, want: plan{stamp: mine, stampMeta: true, adopt: true}},
		{name: "store record lost", edit: func(st *nodeState) {
			st.store.Formatted, st.store.Stamp = false, identity.Stamp{}
		}, err: ErrLostMetadata, words: []string{"the drives /d0, /d1 hold the store of", "has no record of it"}},
		{name: "empty, no bootstrap", edit: empty, err: ErrNoState,
			words: []string{"set cluster.join"}},
		{name: "empty, bootstrap", edit: empty, bootstrap: true, initial: cid,
			want: plan{stamp: identity.Stamp{Cluster: cid}, stampLog: true, stampMeta: true, bootstrap: true}},
		{name: "bootstrap interrupted after the stamps", edit: func(st *nodeState) {
			empty(st)
			st.logStamp, st.logStamped, st.metaStamp, st.metaStamped = mine, true, mine, true
		}, bootstrap: true, initial: cid, want: plan{stamp: mine, bootstrap: true}},
		{name: "bootstrap interrupted after the store's format", edit: func(st *nodeState) {
			st.logGroups, st.logHasMeta, st.metaHas, st.applied = 0, false, false, 0
		}, bootstrap: true, initial: cid, want: plan{stamp: mine, bootstrap: true}},
		{name: "from before stamps", edit: unstamped, initial: cid,
			want: plan{stamp: identity.Stamp{Cluster: cid, Node: oldStoreNode}, stampLog: true, stampMeta: true, adopt: true}},
		{name: "from before stamps, no cluster id", edit: unstamped, err: ErrUnstamped,
			words: []string{"Set cluster.initial_cluster_id", "/shm/n1.raft", "/data/meta"}},
		{name: "adoption interrupted", edit: func(st *nodeState) {
			unstamped(st)
			st.logStamp, st.logStamped = identity.Stamp{Cluster: cid, Node: oldStoreNode}, true
		}, want: plan{stamp: identity.Stamp{Cluster: cid, Node: oldStoreNode}, stampMeta: true, adopt: true}},
		{name: "from before stamps, no store", edit: func(st *nodeState) {
			st.store = nil
			st.logStamp, st.logStamped, st.metaStamp, st.metaStamped = identity.Stamp{}, false, identity.Stamp{}, false
		}, initial: cid, want: plan{stamp: identity.Stamp{Cluster: cid}, stampLog: true, stampMeta: true, adopt: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := base()
			tt.edit(st)
			cl := &config.Cluster{Bootstrap: tt.bootstrap, InitialClusterID: tt.initial}
			p, err := st.decide(cl)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("decide: %v, want %v", err, tt.err)
				}
				for _, w := range tt.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the refusal lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.stamp.Node.IsZero() {
				if p.stamp.Node.IsZero() || p.stamp.Node == nid {
					t.Errorf("node UUID %v, want a new one", p.stamp.Node)
				}
				tt.want.stamp.Node = p.stamp.Node
			}
			if p != tt.want {
				t.Errorf("plan %+v, want %+v", p, tt.want)
			}
		})
	}
}
