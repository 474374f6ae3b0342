package target

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"basalt/pkg/nvme"
)

// entryKeys renders discovery log entries as "NQN-suffix@PORTID/TRADDR:TRSVCID"
// in log order, and checks the fields that are the same for every entry.
func entryKeys(t *testing.T, entries []nvme.DiscoveryLogEntry) []string {
	t.Helper()
	keys := []string{}
	for _, e := range entries {
		fam := uint8(nvme.AddressFamilyIPv4)
		if strings.Contains(e.TRADDR, ":") {
			fam = nvme.AddressFamilyIPv6
		}
		if e.TRTYPE != nvme.TransportTypeTCP || e.ADRFAM != fam || e.SUBTYPE != nvme.SubtypeNVM || e.TREQ != 0 ||
			e.SECTYPE != 0 || e.CNTLID != nvme.CNTLIDDynamic || e.ASQSZ != nvme.DiscoveryASQSZ {
			t.Errorf("entry %+v", e)
		}
		_, name, _ := strings.Cut(e.SUBNQN, "basalt:")
		keys = append(keys, fmt.Sprintf("%s@%d/%s:%s", name, e.PORTID, e.TRADDR, e.TRSVCID))
	}
	return keys
}

// The discovery log with remote subsystems (NVMe-oF 1.1 §5.3): per host,
// local subsystems × local ports, then remote subsystems × their ports, in a
// fixed order, each (SUBNQN, PORTID, TRADDR, TRSVCID) once; GENCTR and the
// discovery AEN move only when the set changes. The steps run in order on one
// target: "vol" is local (host A only, ports 1 and 2), "r" only remote.
func TestDiscoveryRemoteSubsystems(t *testing.T) {
	const r = "nqn.2024-01.io.basalt:r"
	p10 := PortConfig{ID: 10, TRADDR: "198.51.100.10", TRSVCID: "4420"}
	p11 := PortConfig{ID: 11, TRADDR: "198.51.100.11", TRSVCID: "4420"}
	p12 := PortConfig{ID: 12, TRADDR: "2001:db8::12", TRSVCID: "4421"}
	local := []string{"vol@1/192.0.2.1:4420", "vol@2/192.0.2.2:4420"}
	rB := RemoteSubsystem{NQN: r, Hosts: []string{testHostB}, Ports: []PortConfig{p11, p10}}
	steps := []remoteStep{
		{"none", nil, false, local, []string{}},
		{"remote only, host B", []RemoteSubsystem{rB}, true,
			local, []string{"r@10/198.51.100.10:4420", "r@11/198.51.100.11:4420"}},
		{"same set, reordered with repeats", []RemoteSubsystem{{NQN: r, Hosts: []string{testHostB, testHostB},
			Ports: []PortConfig{p10, p11, p10, {ID: 11, TRADDR: "198.51.100.11", TRSVCID: "4420", ADRFAM: 1}}}}, false,
			local, []string{"r@10/198.51.100.10:4420", "r@11/198.51.100.11:4420"}},
		{"local and remote", []RemoteSubsystem{rB, {NQN: testSubNQN, Hosts: []string{testHostNQN}, Ports: []PortConfig{p12, p10}}}, true,
			append(slices.Clone(local), "vol@10/198.51.100.10:4420", "vol@12/2001:db8::12:4421"),
			[]string{"r@10/198.51.100.10:4420", "r@11/198.51.100.11:4420"}},
		{"same port ID, another address", []RemoteSubsystem{{NQN: r, AllowAnyHost: true,
			Ports: []PortConfig{p10, {ID: 10, TRADDR: "198.51.100.99", TRSVCID: "4420"}}}}, true,
			append(slices.Clone(local), "r@10/198.51.100.10:4420", "r@10/198.51.100.99:4420"),
			[]string{"r@10/198.51.100.10:4420", "r@10/198.51.100.99:4420"}},
		{"remote host list differs from the local one", []RemoteSubsystem{{NQN: testSubNQN, Hosts: []string{testHostB}, Ports: []PortConfig{p10}}}, true,
			local, []string{"vol@10/198.51.100.10:4420"}},
		{"invalid entries dropped", []RemoteSubsystem{
			{NQN: nvme.DiscoveryNQN, AllowAnyHost: true, Ports: []PortConfig{p10}},
			{NQN: "", AllowAnyHost: true, Ports: []PortConfig{p10}},
			{NQN: r, Hosts: []string{"", testHostNQN}, Ports: []PortConfig{
				p11,
				{ID: 1, TRADDR: "198.51.100.1", TRSVCID: "4420"}, // a local port ID
				{ID: 13, TRADDR: "0.0.0.0", TRSVCID: "4420"},     // wildcard
				{ID: 14, TRADDR: "198.51.100.14"},                // no TRSVCID
				{ID: 15, TRADDR: "not-an-address", TRSVCID: "4420"},
			}},
			{NQN: r, AllowAnyHost: true, Ports: []PortConfig{p12}}, // repeated NQN
		}, true, append(slices.Clone(local), "r@11/198.51.100.11:4420"), []string{}},
		{"cleared", nil, true, local, []string{}},
		{"cleared again", []RemoteSubsystem{}, false, local, []string{}},
	}
	env := newEnv(t)
	a := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	b := env.connectAdmin(nvme.DiscoveryNQN, testHostB, env.ports[1], 0)
	gen, _ := readDiscoveryLog(t, a.admin)
	for _, st := range steps {
		gen = st.run(t, env, a, b, gen)
	}
}

// remoteStep is one SetRemoteSubsystems call of
// TestDiscoveryRemoteSubsystems and what hosts A and B then see.
type remoteStep struct {
	name         string
	set          []RemoteSubsystem
	changed      bool
	wantA, wantB []string
}

// run applies st with an AER outstanding on a (host A's discovery
// controller), checks the AEN, GENCTR (gen before) and both hosts' logs,
// and returns GENCTR after. An AER left outstanding is flushed.
func (st remoteStep) run(t *testing.T, env *testEnv, a, b *assoc, gen uint64) uint64 {
	t.Helper()
	aer, _ := a.admin.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	env.tgt.SetRemoteSubsystems(st.set)
	if got := a.admin.completed[aer.Slot].Load() == 1; got != st.changed {
		t.Fatalf("%s: AEN sent %v, want %v", st.name, got, st.changed)
	}
	if st.changed {
		if cpl, _ := a.admin.wait(t, aer); cpl.DW0 != nvme.AENDiscoveryChange {
			t.Fatalf("%s: AEN %#x", st.name, cpl.DW0)
		}
	}
	genA, ea := readDiscoveryLog(t, a.admin)
	_, eb := readDiscoveryLog(t, b.admin)
	if (genA != gen) != st.changed {
		t.Errorf("%s: GENCTR %d → %d, changed %v", st.name, gen, genA, st.changed)
	}
	if got := entryKeys(t, ea); !slices.Equal(got, st.wantA) {
		t.Errorf("%s: host A sees\n%q\nwant\n%q", st.name, got, st.wantA)
	}
	if got := entryKeys(t, eb); !slices.Equal(got, st.wantB) {
		t.Errorf("%s: host B sees\n%q\nwant\n%q", st.name, got, st.wantB)
	}
	if st.changed {
		return genA
	}
	env.tgt.SetRemoteSubsystems([]RemoteSubsystem{{NQN: "nqn.2024-01.io.basalt:flush", Ports: []PortConfig{{ID: 9, TRADDR: "198.51.100.9", TRSVCID: "4420"}}}})
	a.admin.wait(t, aer)
	env.tgt.SetRemoteSubsystems(st.set)
	genA, _ = readDiscoveryLog(t, a.admin)
	return genA
}

// A remote port that later becomes local is listed once, as local.
func TestDiscoveryRemotePortBecomesLocal(t *testing.T) {
	env := newEnv(t)
	env.tgt.SetRemoteSubsystems([]RemoteSubsystem{{NQN: testSubNQN, AllowAnyHost: true,
		Ports: []PortConfig{{ID: 3, TRADDR: "198.51.100.3", TRSVCID: "4420"}}}})
	a := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	_, e := readDiscoveryLog(t, a.admin)
	want := []string{"vol@1/192.0.2.1:4420", "vol@2/192.0.2.2:4420", "vol@3/198.51.100.3:4420"}
	if got := entryKeys(t, e); !slices.Equal(got, want) {
		t.Fatalf("before: %q, want %q", got, want)
	}
	if _, err := env.tgt.AddPort(PortConfig{ID: 3, TRADDR: "192.0.2.3", TRSVCID: "4420"}); err != nil {
		t.Fatal(err)
	}
	_, e = readDiscoveryLog(t, a.admin)
	want = []string{"vol@1/192.0.2.1:4420", "vol@2/192.0.2.2:4420", "vol@3/192.0.2.3:4420"}
	if got := entryKeys(t, e); !slices.Equal(got, want) {
		t.Fatalf("after AddPort: %q, want %q", got, want)
	}
}
