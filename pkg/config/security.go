package config

import (
	"fmt"
	"path/filepath"
)

// The [security] section of a cluster node:
//
//	[security]
//	dir = "/var/lib/basalt/security"   # default <data_dir>/security: ca.crt, ca.key, node.crt,
//	                                   # node.key, tokens.json (basaltd pki init writes them)
//	insecure = false                   # true: plain HTTP API without tokens and plain Raft,
//	                                   # for tests that say why; never in production
//	metrics_public = false             # true: /metrics needs no token
//	join_token_file = ""               # with cluster.join: a file holding an admin token
//	                                   # ($BASALT_JOIN_TOKEN overrides it); dir must hold
//	                                   # the cluster's ca.crt

// Security configures how a cluster node authenticates the others and its
// API's clients.
type Security struct {
	// Dir is the node's security directory (pkg/pki). Default
	// <data_dir>/security.
	Dir string `toml:"dir"`
	// Insecure turns authentication off: the API is plain HTTP and
	// answers anyone, Raft is plain TCP. For tests only.
	Insecure bool `toml:"insecure"`
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool `toml:"metrics_public"`
	// JoinTokenFile holds the admin token a joining node (cluster.join)
	// presents to the member it asks; the environment variable
	// BASALT_JOIN_TOKEN, when set, is used instead.
	JoinTokenFile string `toml:"join_token_file"`
}

// EnvJoinToken is the environment variable that gives a joining node its
// admin token (instead of security.join_token_file).
const EnvJoinToken = "BASALT_JOIN_TOKEN"

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
