package node

import (
	"context"
	"testing"

	"basalt/pkg/cluster"
	"basalt/pkg/meta"
)

func TestMetaPersisterSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := meta.Open(meta.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := metaPersister{db: db}
	if _, ok, err := p.Load(); ok || err != nil {
		t.Fatalf("fresh store: ok %v err %v", ok, err)
	}
	m, err := cluster.NewMachine(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := cluster.Command{Op: cluster.OpRegisterNode, Node: &cluster.Node{ID: 1, Name: "n1"}}
	data, _ := cmd.Encode()
	if err := m.Apply(context.Background(), 1, data); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = meta.Open(meta.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err = cluster.NewMachine(metaPersister{db: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.AppliedIndex() != 1 || m.State().Nodes[1] == nil {
		t.Fatalf("after reopen: applied %d, state %+v", m.AppliedIndex(), m.State())
	}
}
