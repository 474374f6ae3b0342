package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"basalt/pkg/backend"
	"basalt/target"
)

// Secrets in the formats nvme gen-dhchap-key and nvme gen-tls-key print
// (the first is the NVMe specification's example).
const (
	testDHCHAP     = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testDHCHAP2    = "DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testDHCHAPCtrl = "DHHC-1:03:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testTLSPSK     = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
)

func TestVolumeDeniesByDefault(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), create("a", 1))
	if v := m.State().Volumes["a"]; v.AllowAnyHost || len(v.Hosts) != 0 {
		t.Fatalf("a volume created without hosts must admit nobody: %+v", v)
	}
	open := create("b", 1)
	open.Create.AllowAnyHost = true
	if res := applyOK(t, m, open); !res.Volume.AllowAnyHost {
		t.Fatal("allow_any_host at create was dropped")
	}
	// Adding a host leaves an explicit allow_any_host alone, and says so.
	if res := applyOK(t, m, Command{Op: OpAddHost, Volume: "b", Host: "nqn.h1"}); !res.Volume.AllowAnyHost ||
		!strings.Contains(res.Note, "--allow-any-host=false") {
		t.Fatalf("add_host on an open volume: %+v, note %q", res.Volume, res.Note)
	}
	no, yes := false, true
	res := applyOK(t, m, Command{Op: OpSetAllowAnyHost, Volume: "b", Allow: &no})
	if res.Volume.AllowAnyHost || res.Note != "" {
		t.Fatalf("set_allow_any_host false: %+v, note %q", res.Volume, res.Note)
	}
	res = applyOK(t, m, Command{Op: OpSetAllowAnyHost, Volume: "a", Allow: &no})
	if !strings.Contains(res.Note, "no host can connect") {
		t.Errorf("closing a volume without hosts: note %q", res.Note)
	}
	if res = applyOK(t, m, Command{Op: OpSetAllowAnyHost, Volume: "a", Allow: &yes}); !res.Volume.AllowAnyHost {
		t.Fatal("set_allow_any_host true did not open the volume")
	}
	if _, err := applyCmd(t, m, Command{Op: OpSetAllowAnyHost, Volume: "a"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("set_allow_any_host without allow: %v", err)
	}
	if _, err := applyCmd(t, m, Command{Op: OpSetAllowAnyHost, Volume: "zz", Allow: &yes}); !errors.Is(err, ErrNotFound) {
		t.Errorf("set_allow_any_host on a missing volume: %v", err)
	}
}

func TestHostSecretsStoredRotatedRemoved(t *testing.T) {
	p := &MemoryPersister{}
	m := machineWith(t, p, register(1), create("a", 1))
	sec := &HostSecrets{DHCHAPSecret: testDHCHAP, DHCHAPCtrlSecret: testDHCHAPCtrl, TLSPSK: testTLSPSK}
	res := applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h1", Secrets: sec})
	if res.Volume.Secrets != nil {
		t.Fatal("a command's result carries the secrets")
	}
	if got := m.State().Volumes["a"].Secrets["nqn.h1"]; got != *sec {
		t.Fatalf("stored %v", got)
	}
	// They persist: a restarted machine has them.
	m2, err := NewMachine(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.State().Volumes["a"].Secrets["nqn.h1"]; got != *sec {
		t.Fatalf("after a restart: %v", got)
	}
	if got := res.Volume.HostAuth["nqn.h1"]; got != "dh-hmac-chap (bidirectional), tls-psk" {
		t.Errorf("HostAuth %q", got)
	}
	// Posting again rotates: the new set replaces the old one whole.
	applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h1", Secrets: &HostSecrets{DHCHAPSecret: testDHCHAP2}})
	if got := m.State().Volumes["a"].Secrets["nqn.h1"]; got != (HostSecrets{DHCHAPSecret: testDHCHAP2}) {
		t.Fatalf("after rotation: %v", got)
	}
	applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h2", Secrets: &HostSecrets{TLSPSK: testTLSPSK}})
	applyOK(t, m, Command{Op: OpRemoveHost, Volume: "a", Host: "nqn.h1"})
	v := m.State().Volumes["a"]
	if _, ok := v.Secrets["nqn.h1"]; ok || v.Secrets["nqn.h2"].TLSPSK != testTLSPSK {
		t.Fatalf("remove_host must clear that host's secrets only: %v", v.Secrets)
	}
	// Adding a host again without secrets clears them.
	res = applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h2"})
	if v := m.State().Volumes["a"]; len(v.Secrets) != 0 || res.Volume.HostAuth["nqn.h2"] != "none" {
		t.Fatalf("add_host without secrets: %v %v", v.Secrets, res.Volume.HostAuth)
	}
	applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h2", Secrets: sec})
	applyOK(t, m, Command{Op: OpDeleteVolume, Volume: "a"})
	applyOK(t, m, create("a", 1))
	if v := m.State().Volumes["a"]; len(v.Secrets) != 0 || len(v.Hosts) != 0 {
		t.Fatalf("a new volume of the same name inherited %v %v", v.Hosts, v.Secrets)
	}
}

func TestHostSecretsRefused(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), create("a", 1))
	bad := strings.Replace(testDHCHAP, "ia6z", "ib6z", 1)
	for _, tc := range []struct {
		name string
		sec  HostSecrets
		want string
	}{
		{"crc", HostSecrets{DHCHAPSecret: bad}, "dhchap_secret: malformed DH-HMAC-CHAP secret: its CRC-32"},
		{"ctrl alone", HostSecrets{DHCHAPCtrlSecret: testDHCHAPCtrl}, "without dhchap_secret"},
		{"ctrl same", HostSecrets{DHCHAPSecret: testDHCHAP, DHCHAPCtrlSecret: testDHCHAP}, "the same as dhchap_secret"},
		{"ctrl bad", HostSecrets{DHCHAPSecret: testDHCHAP, DHCHAPCtrlSecret: bad}, "dhchap_ctrl_secret: malformed"},
		{"psk as dhchap", HostSecrets{DHCHAPSecret: testTLSPSK}, "does not start with"},
		{"dhchap as psk", HostSecrets{TLSPSK: testDHCHAP}, "tls_psk: malformed TLS PSK"},
	} {
		_, err := applyCmd(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h1", Secrets: &tc.sec})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		for _, s := range []string{bad, testDHCHAP, testDHCHAPCtrl, testTLSPSK} {
			if err != nil && strings.Contains(err.Error(), s[13:]) {
				t.Errorf("%s: the error shows a secret: %v", tc.name, err)
			}
		}
	}
	if v := m.State().Volumes["a"]; len(v.Hosts) != 0 || len(v.Secrets) != 0 {
		t.Fatalf("a refused add_host changed the volume: %+v", v)
	}
}

// TestHostSecretsNeverPrinted: fmt and slog show the mechanisms, not the
// secrets; the public copy of a volume has none in its JSON.
func TestHostSecretsNeverPrinted(t *testing.T) {
	sec := HostSecrets{DHCHAPSecret: testDHCHAP, DHCHAPCtrlSecret: testDHCHAPCtrl, TLSPSK: testTLSPSK}
	v := &Volume{Name: "a", Hosts: []string{"nqn.h1"}, Secrets: map[string]HostSecrets{"nqn.h1": sec}}
	var log strings.Builder
	slog.New(slog.NewTextHandler(&log, nil)).Info("x", "sec", sec, "volume", v, "secrets", v.Secrets)
	pub, _ := json.Marshal(v.Public())
	out := []string{fmt.Sprint(sec), fmt.Sprintf("%+v %#v %v", sec, sec, *v), fmt.Sprintf("%+v", v.Secrets),
		log.String(), string(pub)}
	for i, o := range out {
		for _, s := range []string{testDHCHAP, testDHCHAPCtrl, testTLSPSK} {
			if strings.Contains(o, s[13:]) {
				t.Errorf("output %d shows a secret: %s", i, o)
			}
		}
	}
	if !strings.Contains(out[0], "dh-hmac-chap (bidirectional), tls-psk") {
		t.Errorf("String: %s", out[0])
	}
	if v.Secrets == nil {
		t.Fatal("Public changed the volume")
	}
}

// TestSubsystemStartsWithSecrets: a subsystem is exported with its hosts'
// credentials already in place, so that no Connect slips in between its
// creation and the first update.
func TestSubsystemStartsWithSecrets(t *testing.T) {
	tgt, err := target.New(target.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	be, err := backend.NewMemory(1<<20, BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	v := &Volume{Name: "a", Size: 1 << 20, ANAGroup: 1, Hosts: []string{"nqn.h1", "nqn.h2"},
		Secrets: map[string]HostSecrets{"nqn.h1": {DHCHAPSecret: testDHCHAP, TLSPSK: testTLSPSK}}}
	s, err := (&reconciler{t: tgt}).addSubsystem(v, be)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.HostSecrets("nqn.h1"); got != (target.HostSecrets{DHCHAPKey: testDHCHAP, TLSPSK: testTLSPSK}) {
		t.Fatalf("nqn.h1: %v", got)
	}
	if _, ok := s.HostSecrets("nqn.h2"); ok {
		t.Fatal("nqn.h2 has secrets")
	}
}
