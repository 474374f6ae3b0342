package api

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"basalt/pkg/auth"
	"basalt/pkg/cluster"
)

// Authentication and authorization. With Config.Security set, every
// request is checked before its handler runs, by the access its route
// declares (accessOf, the one place that decides it):
//
//	access     routes                                   needs
//	---------  ---------------------------------------  -----------------------------------------
//	read       every GET (and HEAD)                     a token of any role
//	admin      every other method: the changes          an admin token
//	node       /v1/internal/... (forwarded commands,    a verified certificate of a node of this
//	           peer reads)                              cluster (Security.PeerNode); a token is refused
//	local      GET /v1/local                            a token of any role, or a node certificate
//	metrics    /metrics                                 a token of any role; nothing with
//	                                                    Security.MetricsPublic
//
// Tokens come as "Authorization: Bearer basalt_..." and are looked up in
// the node's tokens file (pkg/auth). Node certificates come with the TLS
// handshake: the server asks for one and verifies any it gets against the
// cluster CA, so a certificate from another CA (another cluster) fails the
// handshake itself, before any request; a connection without one is
// accepted and can use the token routes.
//
// A change sent to a node that does not lead the metadata is authorized
// there, by the user's token, and then forwarded to the leader's
// /v1/internal/commands with the forwarding node's certificate: the leader
// trusts the node, not a role it is told. That adds no power a node lacks
// already: a node of the cluster proposes metadata commands through Raft
// anyway (and holds the CA key that signs new nodes).
//
// Every denial is a JSON Error:
//
//	status  code             when
//	------  ---------------  --------------------------------------------------------------
//	401     unauthenticated  no token, a malformed Authorization header, an unknown token
//	                         (with WWW-Authenticate: Bearer, RFC 6750)
//	403     forbidden        a read-only token on a change, a token on a node-only route,
//	                         no node certificate (or not this cluster's) on a node-only route

// Security configures the API's authentication; a nil Config.Security
// serves every request to anyone (the [security] insecure mode, for tests).
type Security struct {
	// Tokens are the API tokens this node accepts; nil: none.
	Tokens *auth.Tokens
	// PeerNode returns the node of this cluster whose certificate the
	// TLS peer presented and the handshake verified, or an error saying
	// why there is none (no TLS, no certificate, a certificate naming
	// another cluster). nil: no request is a node's.
	PeerNode func(cs *tls.ConnectionState) (cluster.NodeID, error)
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool
	// SignNode signs a joining node's certificate request (PEM) for the
	// ID the cluster gave it and the hosts it is reached at, with the
	// cluster CA's key; it returns the certificate (PEM). nil: this node
	// holds no CA key, and answers joins with an error naming one that
	// does.
	SignNode func(csrPEM []byte, id cluster.NodeID, hosts []string) (certPEM []byte, err error)
	// CACert is the cluster CA's certificate (PEM), and TokensJSON the
	// node's tokens file (pkg/auth: names, roles and hashes, no token),
	// which a join's answer carries: the new node accepts the same tokens.
	CACert, TokensJSON []byte
}

// ErrUnauthenticated and ErrForbidden are what an *Error with code
// "unauthenticated" (401) or "forbidden" (403) unwraps to.
var (
	ErrUnauthenticated = errors.New("api: not authenticated")
	ErrForbidden       = errors.New("api: not allowed")
)

// access is what a route needs.
type access int

const (
	accessRead access = iota
	accessAdmin
	accessNode
	accessLocal
	accessMetrics
)

// accessOf returns the access a request to the mux pattern needs.
func accessOf(method, pattern string) access {
	switch {
	case strings.HasPrefix(pattern, "/v1/internal/"):
		return accessNode
	case pattern == "/v1/local":
		return accessLocal
	case pattern == "/metrics":
		return accessMetrics
	case method == http.MethodGet || method == http.MethodHead:
		return accessRead
	}
	return accessAdmin
}

// authHint says where basaltctl takes its token from.
const authHint = "send Authorization: Bearer <token>; basaltctl reads the token from $BASALT_CREDENTIALS " +
	"(a credentials file; make run and basaltd pki init write admin.json and reader.json), " +
	"~/.config/basalt/credentials.json, $BASALT_TOKEN or --token"

// denial is a refused request: its error and its WWW-Authenticate
// challenge (RFC 6750 error code; "" for none, "-" for a bare challenge).
type denial struct {
	err       *Error
	challenge string
}

// authorize returns nil if the request may go on, else the denial.
func (s *Server) authorize(r *http.Request) *denial {
	sec := s.cfg.Security
	_, pattern := s.mux.Handler(r)
	what := r.Method + " " + r.URL.Path
	hasAuth := r.Header.Get("Authorization") != ""
	a := accessOf(r.Method, pattern)
	switch a {
	case accessNode:
		if hasAuth {
			return forbidden(what+" is for the cluster's nodes only: it takes a node certificate and refuses tokens",
				"nodes call it themselves; use the public routes (basaltctl) instead", "")
		}
		return s.nodeCert(r, what)
	case accessLocal:
		if !hasAuth && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			return s.nodeCert(r, what)
		}
	case accessMetrics:
		if sec.MetricsPublic {
			return nil
		}
	}
	id, e := s.authenticate(r, what)
	if e != nil {
		return e
	}
	if a == accessAdmin && !id.Role.Allows(auth.RoleAdmin) {
		return forbidden(fmt.Sprintf("%s changes the cluster: it needs a token of role %q; the token %q is %q",
			what, auth.RoleAdmin, id.Name, id.Role),
			"use an admin token (make run and basaltd pki init write admin.json: export BASALT_CREDENTIALS=.../admin.json)",
			"insufficient_scope")
	}
	return nil
}

// authenticate returns the identity of the request's bearer token.
func (s *Server) authenticate(r *http.Request, what string) (auth.Identity, *denial) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return auth.Identity{}, unauthenticated(what+" needs a token, and the request has none", "")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return auth.Identity{}, unauthenticated(fmt.Sprintf("%s: the Authorization header is not \"Bearer <token>\" "+
			"(scheme %.16q)", what, scheme), "invalid_request")
	}
	id, known := s.cfg.Security.Tokens.Lookup(strings.TrimSpace(token))
	if !known {
		return auth.Identity{}, unauthenticated(what+": the token is not one this node knows (not in its tokens.json)",
			"invalid_token")
	}
	return id, nil
}

// nodeCert checks that the TLS peer is a node of this cluster.
func (s *Server) nodeCert(r *http.Request, what string) *denial {
	peer := s.cfg.Security.PeerNode
	switch {
	case r.TLS == nil:
		return forbidden(what+" is for the cluster's nodes only: it needs a node certificate, and this request "+
			"did not come over TLS", "nodes call it themselves over HTTPS", "")
	case len(r.TLS.PeerCertificates) == 0:
		return forbidden(what+" is for the cluster's nodes only: it needs a node certificate, and the client "+
			"presented none", "nodes call it themselves with their node.crt", "")
	case peer == nil:
		return forbidden(what+" is for the cluster's nodes only, and this node cannot check node certificates", "", "")
	}
	if _, err := peer(r.TLS); err != nil {
		return forbidden(fmt.Sprintf("%s is for the cluster's nodes only: the client certificate is not a node "+
			"certificate of this cluster: %v", what, err), "", "")
	}
	return nil
}

func unauthenticated(msg, bearerError string) *denial {
	return &denial{err: &Error{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: msg, Hint: authHint},
		challenge: cmp.Or(bearerError, "-")}
}

func forbidden(msg, hint, bearerError string) *denial {
	return &denial{err: &Error{Status: http.StatusForbidden, Code: "forbidden", Message: msg, Hint: hint},
		challenge: bearerError}
}

// write writes the denial with its WWW-Authenticate challenge.
func (d *denial) write(w http.ResponseWriter) {
	switch d.challenge {
	case "":
	case "-":
		w.Header().Set("WWW-Authenticate", `Bearer realm="basalt"`)
	default:
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="basalt", error=%q`, d.challenge))
	}
	writeError(w, d.err)
}
