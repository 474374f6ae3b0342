package config

import "path/filepath"

// The security section: where a cluster node's TLS material is, and the
// escape hatch for tests.
//
//	[security]
//	dir = "/var/lib/basalt/security"   # default: <data_dir>/security; ca.crt, node.crt,
//	                                   # node.key (and ca.key on bootstrap nodes), written
//	                                   # by basaltd pki init (pkg/pki, "Security directory")
//	insecure = false                   # true: the Raft transport is plain TCP and
//	                                   # authenticates nobody; only for tests that say why

// Security configures how a cluster node proves who it is to the others
// and checks who they are.
type Security struct {
	// Dir is the node's security directory (pkg/pki). Default
	// <data_dir>/security.
	Dir string `toml:"dir"`
	// Insecure runs without authentication: the Raft transport is plain
	// TCP and accepts any peer that names itself. Default false: a cluster
	// node without valid material in Dir refuses to start.
	Insecure bool `toml:"insecure"`
}

// securityDefaults sets Dir from the data directory.
func (c *Config) securityDefaults() {
	if c.Security.Dir == "" && c.Node.DataDir != "" {
		c.Security.Dir = filepath.Join(c.Node.DataDir, "security")
	}
}
