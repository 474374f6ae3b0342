package main

import (
	"bytes"
	"strings"
	"testing"

	"basalt/pkg/api"
)

// TestFailedReplicasArePrinted: cluster status and volume show name the
// replica whose group failed, and why.
func TestFailedReplicasArePrinted(t *testing.T) {
	const reason = "replication: g2: applying entry 9: store: drive 0 failed"
	var out bytes.Buffer
	printCluster(&out, api.ClusterView{Health: "degraded", Failed: []api.FailedReplica{
		{Volume: "vol1", Node: 2, NodeName: "node-2", Reason: reason}}})
	if want := "Failed:\tvolume vol1 on node-2: " + reason; !strings.Contains(out.String(), want) {
		t.Errorf("cluster status lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	printVolume(&out, api.VolumeView{Health: "degraded", Paths: []api.PathView{
		{Node: 1, Name: "node-1", ANAState: "optimized"},
		{Node: 2, Name: "node-2", ANAState: "inaccessible", Failed: reason, Error: "failed: " + reason}}}, "")
	if want := "Failed:\ton node-2: " + reason; !strings.Contains(out.String(), want) {
		t.Errorf("volume show lacks %q:\n%s", want, out.String())
	}
}
