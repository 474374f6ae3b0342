// Package config reads basaltd's configuration file (TOML). It is the only
// package that imports the TOML library.
//
// Example:
//
//	[node]
//	name = "node1"
//
//	[nvme]
//	listen = "127.0.0.1:4420"      # NVMe/TCP listener, also answers discovery
//	advertise = "10.0.2.2:4420"    # address hosts are told to use (discovery log)
//	port_id = 1
//	discovery_listen = ""          # optional extra discovery-only listener (":8009")
//	tls = "optional"               # TLS 1.3 PSK secure channel: "optional", "required" or "none"
//	max_connections = 4096         # limits (nvme.go); these are the defaults
//	max_connections_per_host = 1024
//	icreq_timeout = "10s"
//	connect_timeout = "10s"
//	h2c_data_timeout = "30s"
//	max_write_bytes = "256MiB"
//	max_controller_write_bytes = "32MiB"
//	max_read_bytes = "256MiB"
//	drain_timeout = "5s"
//
//	[[subsystem]]
//	nqn = "nqn.2026-11.io.basalt:vol1"
//	allow_any_host = false
//	hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]
//	  [[subsystem.host_secret]]    # optional: that host's credentials
//	  host = "nqn.2014-08.org.nvmexpress:uuid:..."
//	  dhchap_secret_file = "/etc/basalt/host1.dhchap"   # DHHC-1:.. (nvme gen-dhchap-key)
//	  tls_psk_file = ""                                 # NVMeTLSkey-1:.. (nvme gen-tls-key)
//	  [[subsystem.namespace]]
//	  nsid = 1
//	  backend = "file"             # "memory" or "file"
//	  path = "/var/lib/basalt/vol1.img"
//	  size = "4GiB"
//	  block_size = 4096
//	  uuid = ""                    # optional; derived from the NQN and NSID if empty
//
// A cluster node has a [cluster] section instead of [[subsystem]]s: its
// volumes come from the cluster metadata (see cluster.go for the schema,
// and scripts/run.sh for a complete 3-node example).
package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Config is the whole file.
type Config struct {
	Node       Node        `toml:"node"`
	NVMe       NVMe        `toml:"nvme"`
	Subsystems []Subsystem `toml:"subsystem"`
	Log        Log         `toml:"log"`
	// Cluster, when present, makes this node a member of a cluster; its
	// volumes then come from the cluster metadata, not from Subsystems.
	Cluster *Cluster `toml:"cluster"`
	// Store, when present, keeps volume replicas in the log-structured
	// store; otherwise a cluster node keeps them as files in Node.DataDir.
	Store *Store `toml:"store"`
	// RaftLog is the persistent-memory region of the Raft logs (cluster
	// nodes only).
	RaftLog RaftLog `toml:"raft_log"`
	// Security is where a cluster node's TLS material is and how its API
	// authenticates (security.go).
	Security Security `toml:"security"`
}

// Node identifies this node.
type Node struct {
	// Name is a human-readable node name used in logs. Default "basalt"
	// (in a cluster: the name of this node's peer entry, or "node<id>").
	Name string `toml:"name"`
	// DataDir holds a cluster node's metadata (badger) and, without a
	// [store], its volume replicas as files. Required in a cluster.
	DataDir string `toml:"data_dir"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `toml:"level"`
	// Format is text or json. Default text.
	Format string `toml:"format"`
}

// NVMe configures the NVMe/TCP target.
type NVMe struct {
	// Listen is host:port to bind. Default "127.0.0.1:4420".
	Listen string `toml:"listen"`
	// Advertise is host:port put in discovery log entries; it may differ
	// from Listen (a host in a VM reaches this node by another address).
	// Default: Listen, with an unspecified host replaced by 127.0.0.1.
	Advertise string `toml:"advertise"`
	// PortID is this port's NVMe port ID, unique across a cluster. Default 1.
	PortID uint16 `toml:"port_id"`
	// DiscoveryListen optionally binds a second listener (usually :8009).
	DiscoveryListen string `toml:"discovery_listen"`
	// TLS is what the port offers of the NVMe/TCP secure channel (TLS 1.3
	// with a host's PSK): "optional" (TLS and plain connections),
	// "required" (plain connections are refused; the discovery log says
	// so) or "none". Default "optional".
	TLS string `toml:"tls"`
	// DiscoveryAuth makes the discovery controller require a host's
	// DH-HMAC-CHAP secret or TLS PSK as the volumes' subsystems do.
	// Default false, as the kernel's nvmet: `nvme discover` and
	// `nvme connect-all` (nvme-cli 2.13) do not authenticate to a
	// discovery controller; the discovery log shows a host NQN only the
	// subsystems it may reach.
	DiscoveryAuth bool `toml:"discovery_auth"`
	// CNTLIDMin and CNTLIDMax bound the controller IDs this node hands out;
	// nodes of one cluster use disjoint ranges. Default 1..0xFFEF; in a
	// cluster the node's slot of 0x3FF IDs (CNTLIDRange).
	CNTLIDMin uint16 `toml:"cntlid_min"`
	CNTLIDMax uint16 `toml:"cntlid_max"`
	// NVMeLimits bound what hosts can make this node hold (nvme.go:
	// defaults and ranges; the transport's tcp.Limits and Options).
	NVMeLimits
}

// The values of nvme.tls.
const (
	TLSOptional = "optional"
	TLSRequired = "required"
	TLSNone     = "none"
)

// Subsystem is one NVM subsystem.
type Subsystem struct {
	NQN          string   `toml:"nqn"`
	Serial       string   `toml:"serial"`
	Model        string   `toml:"model"`
	AllowAnyHost bool     `toml:"allow_any_host"`
	Hosts        []string `toml:"hosts"`
	// HostSecrets are listed hosts' credentials (hostsecrets.go).
	HostSecrets []HostSecret `toml:"host_secret"`
	Namespaces  []Namespace  `toml:"namespace"`
}

// Namespace is one namespace and its backend.
type Namespace struct {
	NSID      uint32 `toml:"nsid"`
	Backend   string `toml:"backend"` // memory | file
	Path      string `toml:"path"`
	Size      Size   `toml:"size"`
	BlockSize int    `toml:"block_size"`
	UUID      string `toml:"uuid"`
}

// Size is a byte count written as "4GiB", "512MiB", "1TB" or a plain number.
type Size int64

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	*s = Size(v)
	return err
}

// ParseSize parses "4GiB", "4G", "4096", "1.5TiB" into bytes (binary units;
// "KB/MB/GB/TB" are decimal).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("config: size %q: want a number with an optional unit like 4GiB", s)
	}
	return int64(v * mult), nil
}

// Load reads, defaults and validates a configuration file.
func Load(path string) (*Config, error) {
	var c Config
	md, err := toml.DecodeFile(path, &c)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		return nil, fmt.Errorf("config: %s: unknown key %q", path, undec[0].String())
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return &c, nil
}

// EnsureDefaults fills unset fields with their documented defaults.
func (c *Config) EnsureDefaults() {
	if c.Cluster != nil {
		c.clusterDefaults()
	}
	if c.Store != nil {
		c.Store.storeDefaults()
	}
	c.securityDefaults()
	if c.Node.Name == "" {
		c.Node.Name = "basalt"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.NVMe.Listen == "" {
		c.NVMe.Listen = "127.0.0.1:4420"
	}
	if c.NVMe.Advertise == "" {
		c.NVMe.Advertise = c.NVMe.Listen
		if host, port, err := net.SplitHostPort(c.NVMe.Listen); err == nil && (host == "" || net.ParseIP(host).IsUnspecified()) {
			c.NVMe.Advertise = net.JoinHostPort("127.0.0.1", port)
		}
	}
	if c.NVMe.PortID == 0 {
		c.NVMe.PortID = 1
	}
	if c.NVMe.TLS == "" {
		c.NVMe.TLS = TLSOptional
	}
	if c.NVMe.CNTLIDMin == 0 {
		c.NVMe.CNTLIDMin = 1
	}
	if c.NVMe.CNTLIDMax == 0 {
		c.NVMe.CNTLIDMax = 0xFFEF
	}
	c.NVMe.NVMeLimits.ensureDefaults()
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		if s.Model == "" {
			s.Model = "Basalt"
		}
		if s.Serial == "" {
			sum := sha256.Sum256([]byte(s.NQN))
			s.Serial = fmt.Sprintf("%x", sum[:10])
		}
		for j := range s.Namespaces {
			if s.Namespaces[j].BlockSize == 0 {
				s.Namespaces[j].BlockSize = 4096
			}
		}
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.NVMe.Listen); err != nil {
		errs = append(errs, fmt.Errorf("nvme.listen %q: %w", c.NVMe.Listen, err))
	}
	host, _, err := net.SplitHostPort(c.NVMe.Advertise)
	if err != nil {
		errs = append(errs, fmt.Errorf("nvme.advertise %q: %w", c.NVMe.Advertise, err))
	} else if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		errs = append(errs, fmt.Errorf("nvme.advertise %q: must be a concrete IP address hosts can reach", c.NVMe.Advertise))
	}
	if c.NVMe.CNTLIDMin > c.NVMe.CNTLIDMax || c.NVMe.CNTLIDMax > 0xFFEF {
		errs = append(errs, fmt.Errorf("nvme.cntlid_min/max %d..%d: want 1 <= min <= max <= 65519", c.NVMe.CNTLIDMin, c.NVMe.CNTLIDMax))
	}
	switch c.NVMe.TLS {
	case TLSOptional, TLSRequired, TLSNone:
	default:
		errs = append(errs, fmt.Errorf("nvme.tls %q: want %q, %q or %q", c.NVMe.TLS, TLSOptional, TLSRequired, TLSNone))
	}
	errs = append(errs, c.NVMe.NVMeLimits.validate()...)
	seen := map[string]bool{}
	for i, s := range c.Subsystems {
		errs = append(errs, s.validate(i, seen, c.Store != nil)...)
	}
	if c.Store != nil {
		errs = append(errs, c.Store.validate()...)
	}
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.validateSecurity()...)
	return errors.Join(errs...)
}

func (s *Subsystem) validate(i int, seen map[string]bool, haveStore bool) []error {
	var errs []error
	where := fmt.Sprintf("subsystem[%d] %q", i, s.NQN)
	if !strings.HasPrefix(s.NQN, "nqn.") || len(s.NQN) > 223 {
		errs = append(errs, fmt.Errorf("%s: nqn must start with \"nqn.\" and be at most 223 bytes", where))
	}
	if seen[s.NQN] {
		errs = append(errs, fmt.Errorf("%s: duplicate nqn", where))
	}
	seen[s.NQN] = true
	if !s.AllowAnyHost && len(s.Hosts) == 0 {
		errs = append(errs, fmt.Errorf("%s: no host may connect: set allow_any_host = true or list hosts", where))
	}
	errs = append(errs, s.validateHostSecrets(where)...)
	nsids := map[uint32]bool{}
	for _, n := range s.Namespaces {
		w := fmt.Sprintf("%s namespace %d", where, n.NSID)
		switch {
		case n.NSID == 0 || n.NSID == 0xFFFFFFFF:
			errs = append(errs, fmt.Errorf("%s: nsid must be 1..4294967294", w))
		case nsids[n.NSID]:
			errs = append(errs, fmt.Errorf("%s: duplicate nsid", w))
		}
		nsids[n.NSID] = true
		if n.Backend != "memory" && n.Backend != "file" && n.Backend != "store" {
			errs = append(errs, fmt.Errorf("%s: backend %q: want \"memory\", \"file\" or \"store\"", w, n.Backend))
		}
		if n.Backend == "store" && !haveStore {
			errs = append(errs, fmt.Errorf("%s: store backend needs a [store] section (drives and write buffer)", w))
		}
		if n.Backend == "store" && n.BlockSize != 4096 {
			errs = append(errs, fmt.Errorf("%s: the store serves 4096-byte blocks only", w))
		}
		if n.Backend == "file" && n.Path == "" {
			errs = append(errs, fmt.Errorf("%s: file backend needs a path", w))
		}
		if n.BlockSize != 512 && n.BlockSize != 4096 {
			errs = append(errs, fmt.Errorf("%s: block_size %d: want 512 or 4096", w, n.BlockSize))
		}
		if n.Size <= 0 || int64(n.Size)%int64(max(n.BlockSize, 1)) != 0 {
			errs = append(errs, fmt.Errorf("%s: size %d: want a positive multiple of block_size", w, n.Size))
		}
	}
	return errs
}
