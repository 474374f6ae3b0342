package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"basalt/pkg/cluster"
)

// Client calls a node's API. Its methods return *Error for answers with
// an error status (errors.Is works with the cluster sentinels), and
// other errors for transport failures.
type Client struct {
	// Base is the node's URL ("https://127.0.0.1:9420").
	Base string
	HTTP *http.Client
	// Token, if set, is sent as the bearer token of every request
	// (auth.go).
	Token string
	// scheme is what a base without one gets: "http", or "https" for a
	// client made by NewTLSClient.
	scheme string
}

// NewClient returns a client of the API at base ("http://host:port" or
// "host:port"), in plain HTTP without credentials: for nodes that run
// with [security] insecure = true.
func NewClient(base string) *Client {
	return &Client{Base: normalizeBase(base, "http"), HTTP: &http.Client{Timeout: 30 * time.Second}, scheme: "http"}
}

// NewTLSClient returns a client of the API at base ("https://host:port"
// or "host:port") over HTTPS: tlsCfg's RootCAs verify the node (the
// cluster CA), its Certificates, if any, are presented (a node's own
// certificate, for the node-only routes); token, if not "", is sent as
// the bearer token.
func NewTLSClient(base string, tlsCfg *tls.Config, token string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.Proxy = nil // the nodes talk to each other directly
	return &Client{Base: normalizeBase(base, "https"), HTTP: &http.Client{Timeout: 30 * time.Second, Transport: tr},
		Token: token, scheme: "https"}
}

func normalizeBase(base, scheme string) string {
	if base != "" && !strings.Contains(base, "://") {
		base = scheme + "://" + base
	}
	return strings.TrimRight(base, "/")
}

// At returns a client of another node's API (addr "host:port"), sharing
// the HTTP client (its TLS configuration) and the token.
func (c *Client) At(addr string) *Client {
	scheme := cmp.Or(c.scheme, "http")
	return &Client{Base: normalizeBase(addr, scheme), HTTP: c.HTTP, Token: c.Token, scheme: scheme}
}

// authorize adds the client's token to req.
func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the Basalt API at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", c.Base, err)
	}
	if resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Code, e.Message = "internal", fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
	}
	return nil
}

// Cluster returns the cluster status.
func (c *Client) Cluster(ctx context.Context) (ClusterView, error) {
	var v ClusterView
	return v, c.do(ctx, "GET", "/v1/cluster", nil, &v)
}

// Nodes lists the nodes.
func (c *Client) Nodes(ctx context.Context) ([]NodeView, error) {
	var v []NodeView
	return v, c.do(ctx, "GET", "/v1/nodes", nil, &v)
}

// Volumes lists the volumes.
func (c *Client) Volumes(ctx context.Context) ([]VolumeView, error) {
	var v []VolumeView
	return v, c.do(ctx, "GET", "/v1/volumes", nil, &v)
}

// Volume returns one volume.
func (c *Client) Volume(ctx context.Context, name string) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "GET", "/v1/volumes/"+url.PathEscape(name), nil, &v)
}

// CreateVolume creates a volume.
func (c *Client) CreateVolume(ctx context.Context, req CreateVolumeRequest) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "POST", "/v1/volumes", req, &v)
}

// DeleteVolume deletes a volume and its data.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/volumes/"+url.PathEscape(name), nil, nil)
}

// ResizeVolume grows a volume.
func (c *Client) ResizeVolume(ctx context.Context, name string, size int64) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(name)+"/resize", ResizeRequest{Size: Size(size)}, &v)
}

// AddHost allows a host NQN on a volume without credentials (any it had
// are removed); AddHostWith gives it some.
func (c *Client) AddHost(ctx context.Context, name, nqn string) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(name)+"/hosts/"+url.PathEscape(nqn), nil, &v)
}

// AddHostWith allows a host NQN on a volume with the credentials req sets
// (replacing any it had); secrets the node generated are in the answer's
// Generated, this once.
func (c *Client) AddHostWith(ctx context.Context, name, nqn string, req AddHostRequest) (AddHostView, error) {
	var v AddHostView
	return v, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(name)+"/hosts/"+url.PathEscape(nqn), req, &v)
}

// SetAllowAnyHost opens a volume to every host that reaches a node's NVMe
// port (true), or admits only its listed hosts (false).
func (c *Client) SetAllowAnyHost(ctx context.Context, name string, allow bool) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "PATCH", "/v1/volumes/"+url.PathEscape(name), VolumeSettings{AllowAnyHost: &allow}, &v)
}

// RemoveHost disallows a host NQN on a volume.
func (c *Client) RemoveHost(ctx context.Context, name, nqn string) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "DELETE", "/v1/volumes/"+url.PathEscape(name)+"/hosts/"+url.PathEscape(nqn), nil, &v)
}

// Local returns the node's own status.
func (c *Client) Local(ctx context.Context) (LocalView, error) {
	var v LocalView
	return v, c.do(ctx, "GET", "/v1/local", nil, &v)
}

// Command runs a metadata command on the node, which must lead the
// metadata group.
func (c *Client) Command(ctx context.Context, cmd cluster.Command) (cluster.Result, error) {
	var r cluster.Result
	err := c.do(ctx, "POST", "/v1/internal/commands", cmd, &r)
	var ae *Error
	if err != nil && !errors.As(err, &ae) {
		// The leader is unreachable: let Submit look for a leader again.
		err = fmt.Errorf("%w: %w", cluster.ErrNoLeader, err)
	}
	return r, err
}

// Forwarder returns a cluster.Config.Forward that sends commands to the
// leader's API with c's HTTP client.
func (c *Client) Forwarder() func(ctx context.Context, addr string, cmd cluster.Command) (cluster.Result, error) {
	return func(ctx context.Context, addr string, cmd cluster.Command) (cluster.Result, error) {
		return c.At(addr).Command(ctx, cmd)
	}
}
