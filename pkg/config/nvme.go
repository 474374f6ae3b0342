package config

import (
	"fmt"
	"time"
)

// Defaults of NVMeLimits: those of the NVMe/TCP transport (target/tcp
// Limits and Options) and of the target (target.Config.DrainTimeout).
const (
	DefaultMaxConnections          = 4096
	DefaultMaxConnectionsPerHost   = 1024
	DefaultICReqTimeout            = 10 * time.Second
	DefaultConnectTimeout          = 10 * time.Second
	DefaultH2CDataTimeout          = 30 * time.Second
	DefaultMaxWriteBytes           = 256 << 20
	DefaultMaxControllerWriteBytes = 32 << 20
	DefaultMaxReadBytes            = 256 << 20
	DefaultDrainTimeout            = 5 * time.Second
)

// NVMeLimits are the [nvme] keys that bound what hosts can make this node
// hold. Each has a default; a value outside its range is an error.
type NVMeLimits struct {
	// MaxConnections is the most NVMe/TCP connections open at once on
	// this node (1..1,000,000); one more is closed when accepted.
	// Default 4096.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerHost is the most from one remote IP address
	// (1..max_connections). A host opens 1 + (I/O queues) connections per
	// volume it attaches through this node. Default 1024.
	MaxConnectionsPerHost int `toml:"max_connections_per_host"`
	// ICReqTimeout closes a connection that has not sent its ICReq in
	// time (100ms..10m). Default "10s".
	ICReqTimeout Duration `toml:"icreq_timeout"`
	// ConnectTimeout closes a connection whose Fabrics Connect has not
	// succeeded this long after its ICResp (100ms..10m). Default "10s".
	ConnectTimeout Duration `toml:"connect_timeout"`
	// H2CDataTimeout closes a connection when the data an R2T asked for
	// has not all arrived in time (1s..10m). Default "30s".
	H2CDataTimeout Duration `toml:"h2c_data_timeout"`
	// MaxWriteBytes bounds the buffers of writes whose data the node has
	// asked for by R2T (1MiB..1TiB); beyond it a write waits for its R2T.
	// Default "256MiB".
	MaxWriteBytes Size `toml:"max_write_bytes"`
	// MaxControllerWriteBytes bounds them per controller (128KiB..
	// max_write_bytes). Default "32MiB".
	MaxControllerWriteBytes Size `toml:"max_controller_write_bytes"`
	// MaxReadBytes bounds every other data buffer: reads, in-capsule
	// data, admin commands (1MiB..1TiB); beyond it a command waits for a
	// buffer before it runs. Default "256MiB".
	MaxReadBytes Size `toml:"max_read_bytes"`
	// DrainTimeout bounds how long removing a volume waits for the
	// commands in flight on it (100ms..1m); after it, removal goes on.
	// Default "5s".
	DrainTimeout Duration `toml:"drain_timeout"`
}

func (l *NVMeLimits) ensureDefaults() {
	setDefault(&l.MaxConnections, DefaultMaxConnections)
	// The per-host and per-controller defaults never exceed the node-wide
	// limits they are part of, when only those are set.
	setDefault(&l.MaxConnectionsPerHost, min(DefaultMaxConnectionsPerHost, l.MaxConnections))
	setDefault(&l.ICReqTimeout, Duration(DefaultICReqTimeout))
	setDefault(&l.ConnectTimeout, Duration(DefaultConnectTimeout))
	setDefault(&l.H2CDataTimeout, Duration(DefaultH2CDataTimeout))
	setDefault(&l.MaxWriteBytes, DefaultMaxWriteBytes)
	setDefault(&l.MaxControllerWriteBytes, min(DefaultMaxControllerWriteBytes, l.MaxWriteBytes))
	setDefault(&l.MaxReadBytes, DefaultMaxReadBytes)
	setDefault(&l.DrainTimeout, Duration(DefaultDrainTimeout))
}

func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

func (l *NVMeLimits) validate() []error {
	var errs []error
	check := func(ok bool, key string, v any, want string) {
		if !ok {
			errs = append(errs, fmt.Errorf("nvme.%s %v: want %s", key, v, want))
		}
	}
	check(l.MaxConnections >= 1 && l.MaxConnections <= 1_000_000, "max_connections", l.MaxConnections, "1..1000000")
	check(l.MaxConnectionsPerHost >= 1 && l.MaxConnectionsPerHost <= l.MaxConnections,
		"max_connections_per_host", l.MaxConnectionsPerHost, "1..max_connections")
	for _, d := range []struct {
		key      string
		v        Duration
		min, max time.Duration
	}{
		{"icreq_timeout", l.ICReqTimeout, 100 * time.Millisecond, 10 * time.Minute},
		{"connect_timeout", l.ConnectTimeout, 100 * time.Millisecond, 10 * time.Minute},
		{"h2c_data_timeout", l.H2CDataTimeout, time.Second, 10 * time.Minute},
		{"drain_timeout", l.DrainTimeout, 100 * time.Millisecond, time.Minute},
	} {
		check(time.Duration(d.v) >= d.min && time.Duration(d.v) <= d.max, d.key, time.Duration(d.v),
			fmt.Sprintf("%v..%v", d.min, d.max))
	}
	check(l.MaxWriteBytes >= 1<<20 && l.MaxWriteBytes <= 1<<40, "max_write_bytes", l.MaxWriteBytes, "1MiB..1TiB")
	check(l.MaxControllerWriteBytes >= 128<<10 && l.MaxControllerWriteBytes <= l.MaxWriteBytes,
		"max_controller_write_bytes", l.MaxControllerWriteBytes, "128KiB..max_write_bytes")
	check(l.MaxReadBytes >= 1<<20 && l.MaxReadBytes <= 1<<40, "max_read_bytes", l.MaxReadBytes, "1MiB..1TiB")
	return errs
}
