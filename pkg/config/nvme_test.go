package config

import (
	"strings"
	"testing"
	"time"
)

const nvmeBase = `
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:v"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "64MiB"
`

func TestNVMeLimitsDefaultsAndKeys(t *testing.T) {
	c, err := Load(write(t, nvmeBase))
	if err != nil {
		t.Fatal(err)
	}
	want := NVMeLimits{
		MaxConnections: 4096, MaxConnectionsPerHost: 1024,
		ICReqTimeout: Duration(10 * time.Second), ConnectTimeout: Duration(10 * time.Second),
		H2CDataTimeout: Duration(30 * time.Second), MaxWriteBytes: 256 << 20,
		MaxControllerWriteBytes: 32 << 20, MaxReadBytes: 256 << 20, DrainTimeout: Duration(5 * time.Second),
	}
	if c.NVMe.NVMeLimits != want {
		t.Fatalf("defaults %+v, want %+v", c.NVMe.NVMeLimits, want)
	}
	c, err = Load(write(t, `
[nvme]
max_connections = 100
max_connections_per_host = 10
icreq_timeout = "2s"
connect_timeout = "3s"
h2c_data_timeout = "20s"
max_write_bytes = "64MiB"
max_controller_write_bytes = "4MiB"
max_read_bytes = "32MiB"
drain_timeout = "1s"
`+nvmeBase))
	if err != nil {
		t.Fatal(err)
	}
	want = NVMeLimits{
		MaxConnections: 100, MaxConnectionsPerHost: 10,
		ICReqTimeout: Duration(2 * time.Second), ConnectTimeout: Duration(3 * time.Second),
		H2CDataTimeout: Duration(20 * time.Second), MaxWriteBytes: 64 << 20,
		MaxControllerWriteBytes: 4 << 20, MaxReadBytes: 32 << 20, DrainTimeout: Duration(time.Second),
	}
	if c.NVMe.NVMeLimits != want {
		t.Fatalf("parsed %+v, want %+v", c.NVMe.NVMeLimits, want)
	}
}

// Every value outside its range is reported, each by its key.
func TestNVMeLimitsRanges(t *testing.T) {
	_, err := Load(write(t, `
[nvme]
max_connections = 2000000
max_connections_per_host = -1
icreq_timeout = "1ms"
connect_timeout = "1h"
h2c_data_timeout = "-1s"
max_write_bytes = "512KiB"
max_controller_write_bytes = "64KiB"
max_read_bytes = "2TiB"
drain_timeout = "2m"
`+nvmeBase))
	if err == nil {
		t.Fatal("out-of-range limits accepted")
	}
	for _, key := range []string{"max_connections ", "max_connections_per_host", "icreq_timeout", "connect_timeout",
		"h2c_data_timeout", "max_write_bytes", "max_controller_write_bytes", "max_read_bytes", "drain_timeout"} {
		if !strings.Contains(err.Error(), "nvme."+key) {
			t.Errorf("error does not name nvme.%s:\n%v", key, err)
		}
	}
	if _, err := Load(write(t, "[nvme]\nmax_controller_write_bytes = \"512MiB\"\n"+nvmeBase)); err == nil ||
		!strings.Contains(err.Error(), "max_controller_write_bytes") {
		t.Fatalf("a controller budget above the node's: %v", err)
	}
}
