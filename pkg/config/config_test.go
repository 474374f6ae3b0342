package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "basaltd.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadAppliesDefaults(t *testing.T) {
	c, err := Load(write(t, `
[nvme]
listen = "0.0.0.0:4420"
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:v"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "64MiB"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NVMe.Advertise != "127.0.0.1:4420" {
		t.Errorf("advertise = %q, want the listen port on 127.0.0.1", c.NVMe.Advertise)
	}
	ns := c.Subsystems[0].Namespaces[0]
	if ns.Size != 64<<20 || ns.BlockSize != 4096 {
		t.Errorf("namespace = %+v", ns)
	}
	if c.Subsystems[0].Serial == "" || c.NVMe.PortID != 1 || c.NVMe.CNTLIDMax != 0xFFEF {
		t.Errorf("defaults missing: %+v %+v", c.Subsystems[0], c.NVMe)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := Load(write(t, `
[nvme]
advertise = "0.0.0.0:4420"
[[subsystem]]
nqn = "bad"
  [[subsystem.namespace]]
  nsid = 0
  backend = "tape"
  size = "100"
  block_size = 1000
`))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"advertise", "must start with", "no host may connect", "nsid must be", "backend \"tape\"", "block_size 1000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	_, err := Load(write(t, "[nvme]\nlisten_addr = \"x\"\n"))
	if err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("err = %v, want unknown key", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4GiB": 4 << 30, "512MiB": 512 << 20, "4096": 4096, "1G": 1 << 30, "2KB": 2000, "1.5KiB": 1536} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1G", "GiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}
