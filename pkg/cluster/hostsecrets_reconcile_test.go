package cluster_test

import (
	"testing"

	"basalt/pkg/cluster"
	"basalt/target"
)

// TestReconcileGivesTheTargetHostSecrets: every node's subsystem of a
// volume gets its hosts' credentials; a rotation reaches the running
// subsystem (the same one, not re-created); removing the host takes its
// credentials away; a node that starts later builds the subsystem with them.
func TestReconcileGivesTheTargetHostSecrets(t *testing.T) {
	const (
		dhchap  = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
		dhchap2 = "DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
		ctrl    = "DHHC-1:03:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
		psk     = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
		host    = "nqn.host-a"
	)
	tc := newTestCluster(t, 3)
	res, err := tc.submit(1, createCmd("vol1", 1<<20, 3))
	if err != nil {
		t.Fatal(err)
	}
	nqn := res.Volume.NQN()
	tc.eventually("every node exports the volume", func() bool {
		for _, tn := range tc.nodes {
			if tn.t.Subsystem(nqn) == nil {
				return false
			}
		}
		return true
	})
	if s := tc.nodes[1].t.Subsystem(nqn); s.HostAllowed(host) {
		t.Fatal("a volume created without hosts admits a host")
	}
	subs := map[cluster.NodeID]*target.Subsystem{}
	for id, tn := range tc.nodes {
		subs[id] = tn.t.Subsystem(nqn)
	}
	everywhere := func(what string, want target.HostSecrets, allowed bool) {
		t.Helper()
		tc.eventually(what, func() bool {
			for id, tn := range tc.nodes {
				s := tn.t.Subsystem(nqn)
				if s == nil || (subs[id] != nil && s != subs[id]) {
					return false
				}
				got, _ := s.HostSecrets(host)
				if got != want || s.HostAllowed(host) != allowed {
					return false
				}
			}
			return true
		})
	}
	add := func(sec cluster.HostSecrets) {
		t.Helper()
		if _, err := tc.submit(2, cluster.Command{Op: cluster.OpAddHost, Volume: "vol1", Host: host, Secrets: &sec}); err != nil {
			t.Fatal(err)
		}
	}
	add(cluster.HostSecrets{DHCHAPSecret: dhchap, DHCHAPCtrlSecret: ctrl, TLSPSK: psk})
	everywhere("the subsystems hold the host's secrets",
		target.HostSecrets{DHCHAPKey: dhchap, DHCHAPCtrlKey: ctrl, TLSPSK: psk}, true)

	add(cluster.HostSecrets{DHCHAPSecret: dhchap2})
	everywhere("the rotation reaches the running subsystems", target.HostSecrets{DHCHAPKey: dhchap2}, true)

	// A node that starts now builds its subsystem with the secrets.
	n3 := tc.nodes[3]
	n3.stop()
	n3 = tc.start(3, n3.replicas, n3.persist)
	delete(subs, 3)
	everywhere("the restarted node's subsystem has the secrets", target.HostSecrets{DHCHAPKey: dhchap2}, true)

	if _, err := tc.submit(3, cluster.Command{Op: cluster.OpRemoveHost, Volume: "vol1", Host: host}); err != nil {
		t.Fatal(err)
	}
	everywhere("a removed host's secrets are gone", target.HostSecrets{}, false)
}
