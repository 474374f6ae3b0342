package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"basalt/pkg/api"
	"basalt/pkg/auth"
)

// Credentials, like kubectl's: a credentials file (pkg/auth, JSON with
// api, ca_file and token) named by $BASALT_CREDENTIALS, else
// ~/.config/basalt/credentials.json; $BASALT_API, $BASALT_CA and
// $BASALT_TOKEN override one field each; --api, --ca and --token override
// everything. An https API is verified against the CA file (the cluster's
// ca.crt); the token is sent as a bearer token.

// credentialHint says how to give basaltctl credentials.
const credentialHint = "export BASALT_CREDENTIALS=PATH/admin.json (make run prints the path; basaltd pki init " +
	"writes admin.json and reader.json), or set BASALT_TOKEN and BASALT_CA, or pass --token and --ca"

// resolve finds the credentials and builds the client.
func (o *options) resolve() error {
	home, _ := os.UserHomeDir()
	c, src, err := auth.Resolve(os.Getenv, home, auth.Overrides{API: o.api, CAFile: o.caFile, Token: o.token})
	if err != nil {
		return usageError{fmt.Errorf("credentials: %w", err)}
	}
	o.creds, o.credSrc = c, src
	if !strings.HasPrefix(c.API, "https://") {
		o.cl = api.NewClient(c.API)
		o.cl.Token = c.Token
		return nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return usageError{fmt.Errorf("the cluster's CA certificate: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return usageError{fmt.Errorf("the cluster's CA certificate %s holds no PEM certificate", c.CAFile)}
		}
		tlsCfg.RootCAs = pool
	}
	o.cl = api.NewTLSClient(c.API, tlsCfg, c.Token)
	return nil
}

// from says where the credentials came from, for an error's hint.
func (o *options) from() string {
	var parts []string
	if o.credSrc.File != "" {
		parts = append(parts, "credentials file "+o.credSrc.File)
	}
	if o.creds.Token == "" {
		parts = append(parts, "no token")
	}
	if len(parts) == 0 {
		return "a token from the environment or --token"
	}
	return strings.Join(parts, ", ")
}

// authHint adds what to do to a 401 or 403 answer.
func (o *options) authHint(ae *api.Error) string {
	switch {
	case ae.Status == http.StatusUnauthorized:
		return fmt.Sprintf("basaltctl used %s; %s", o.from(), credentialHint)
	case ae.Status == http.StatusForbidden && strings.Contains(ae.Message, "read-only"):
		return "this needs admin credentials: export BASALT_CREDENTIALS=PATH/admin.json (or BASALT_TOKEN=<an admin token>)"
	}
	return ""
}

// tlsHint explains a failed TLS handshake.
func tlsHint(err error) string {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua), strings.Contains(err.Error(), "certificate signed by unknown authority"):
		return "the node's certificate is not signed by a CA basaltctl trusts: give the cluster's ca.crt with " +
			"--ca, $BASALT_CA or ca_file in the credentials file"
	case errors.As(err, &hn):
		return "the node's certificate does not name the address used: use one basaltd pki init was given (--hosts)"
	case errors.As(err, &rh):
		return "the node does not speak TLS: it runs with security.insecure; use --api http://HOST:PORT"
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the node does not speak TLS: it runs with security.insecure; use --api http://HOST:PORT"
	}
	return ""
}
