package config

import (
	"fmt"
	"path/filepath"
)

// The security section: where a cluster node's TLS material is, how its
// API authenticates, and the escape hatch for tests.
//
//	[security]
//	dir = "/var/lib/basalt/security"   # default: <data_dir>/security; ca.crt, node.crt,
//	                                   # node.key (and ca.key on bootstrap nodes), tokens.json,
//	                                   # written by basaltd pki init (pkg/pki, "Security directory")
//	insecure = false                   # true: the Raft transport is plain TCP and
//	                                   # authenticates nobody, the API plain HTTP without
//	                                   # tokens; only for tests that say why
//	metrics_public = false             # true: /metrics needs no token
//	join_token_file = ""               # with cluster.join: a file holding an admin token
//	                                   # ($BASALT_JOIN_TOKEN overrides it); dir must hold
//	                                   # the cluster's ca.crt (copied from any node)
//	kek_file = ""                      # the cluster's key-encryption keyring (pkg/crypt,
//	                                   # "Keyring file"; mode 0600), the same on every node:
//	                                   # needed to create and serve encrypted volumes

// Security configures how a cluster node proves who it is to the others
// and checks who they are, and who may use its API.
type Security struct {
	// Dir is the node's security directory (pkg/pki). Default
	// <data_dir>/security.
	Dir string `toml:"dir"`
	// Insecure runs without authentication: the Raft transport is plain
	// TCP and accepts any peer that names itself, the API is plain HTTP and
	// answers anyone. Default false: a cluster node without valid material
	// in Dir refuses to start.
	Insecure bool `toml:"insecure"`
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool `toml:"metrics_public"`
	// JoinTokenFile holds the admin token a joining node (cluster.join)
	// presents to the member it asks; the environment variable
	// BASALT_JOIN_TOKEN, when set, is used instead.
	JoinTokenFile string `toml:"join_token_file"`
	// KEKFile is the cluster's keyring of key-encryption keys, which wrap
	// the data keys of encrypted volumes (pkg/crypt). Empty: none, and
	// volumes with encryption can be neither created nor served here.
	KEKFile string `toml:"kek_file"`
}

// EnvJoinToken is the environment variable that gives a joining node its
// admin token (instead of security.join_token_file).
const EnvJoinToken = "BASALT_JOIN_TOKEN"

// securityDefaults sets Dir from the data directory.
func (c *Config) securityDefaults() {
	if c.Security.Dir == "" && c.Node.DataDir != "" {
		c.Security.Dir = filepath.Join(c.Node.DataDir, "security")
	}
}

func (c *Config) validateSecurity() []error {
	var errs []error
	if c.Security.JoinTokenFile != "" && (c.Cluster == nil || c.Cluster.Join == "") {
		errs = append(errs, fmt.Errorf("security.join_token_file is for a node that joins: set cluster.join too, or remove it"))
	}
	return errs
}
