package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/cluster"
)

// Config configures a Server.
type Config struct {
	Cluster *cluster.Cluster
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// Scrub returns this node's scrub schedule; nil (or a nil func): the
	// node has none (no store).
	Scrub func() *ScrubView
	// Drives manages this node's drives (drives.go); nil: it has none.
	Drives DriveManager
	// Client reaches the other nodes (the local status of each); default
	// NewClient with short timeouts.
	Client *Client
	Clock  clock.Clock
	Logger *slog.Logger
	// RequestTimeout bounds a change (its commit); default 10s.
	RequestTimeout time.Duration
	// ClusterID returns the cluster's UUID, which a joining node adopts
	// (nodes.go); nil: joins are answered without it.
	ClusterID func() string
	// PeerReads serves this node's replicas to other nodes' leaders
	// (peer_read.go); nil: 404.
	PeerReads PeerReads
	// Security authenticates and authorizes every request (auth.go);
	// nil: none, anyone may do anything.
	Security *Security
}

// Server is the HTTP API of one node.
type Server struct {
	cfg      Config
	recovery recoveryRates
	c        *cluster.Cluster
	log      *slog.Logger
	mux      *http.ServeMux
}

// maxBody bounds request bodies.
const maxBody = 1 << 20

// NewServer returns the API handler.
func NewServer(cfg Config) *Server {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Client == nil {
		cfg.Client = NewClient("")
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	s := &Server{cfg: cfg, c: cfg.Cluster, log: cfg.Logger, mux: http.NewServeMux()}
	s.route("/v1/cluster", map[string]handler{"GET": s.getCluster})
	s.route("/v1/nodes", map[string]handler{"GET": s.getNodes})
	s.route("/v1/volumes", map[string]handler{"GET": s.listVolumes, "POST": s.createVolume})
	s.route("/v1/volumes/{name}", map[string]handler{"GET": s.getVolume, "DELETE": s.deleteVolume, "PATCH": s.setVolume})
	s.route("/v1/volumes/{name}/resize", map[string]handler{"POST": s.resizeVolume})
	s.route("/v1/volumes/{name}/hosts/{nqn}", map[string]handler{"POST": s.addHost, "DELETE": s.removeHost})
	s.route("/v1/local", map[string]handler{"GET": s.getLocal})
	s.route("/v1/internal/commands", map[string]handler{"POST": s.postCommand})
	s.driveRoutes()
	s.qosRoutes()        // qos.go
	s.encryptionRoutes() // encryption.go
	s.snapshotRoutes()   // snapshots.go
	s.nodeRoutes()
	s.peerReadRoutes()
	s.mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Metrics == nil {
			writeError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "metrics are not enabled on this node"})
			return
		}
		cfg.Metrics.ServeHTTP(w, r)
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path),
			Hint:    "endpoints: /v1/cluster, /v1/nodes, /v1/volumes[/NAME[/resize|/hosts/NQN|/qos|/snapshots[/SNAP]|/rollback]], /metrics"})
	})
	return s
}

// handler answers a request with a value to encode (and its status) or
// an error.
type handler func(r *http.Request) (int, any, error)

func (s *Server) route(pattern string, methods map[string]handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		h := methods[r.Method]
		if h == nil {
			allow := slices.Sorted(maps.Keys(methods))
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: "invalid",
				Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path), Hint: "allowed: " + strings.Join(allow, ", ")})
			return
		}
		status, v, err := h(r)
		if err != nil {
			e := errorFor(err)
			if e.Status >= 500 {
				s.log.Warn("API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, e)
			return
		}
		writeJSON(w, status, v)
	})
}

// ServeHTTP implements http.Handler.
// With Config.Security, it authorizes the request first (auth.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Security != nil {
		if d := s.authorize(r); d != nil {
			d.write(w)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.Code == "not_leader" || e.Code == "no_leader" || e.Code == "not_volume_leader" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, e)
}

func readBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%w: body: %w", cluster.ErrInvalid, err)
	}
	if len(b) > maxBody {
		return fmt.Errorf("%w: body larger than %d bytes", cluster.ErrInvalid, maxBody)
	}
	return decodeStrict(b, v)
}

// submit runs a change on the metadata leader within the request timeout.
func (s *Server) submit(r *http.Request, cmd cluster.Command) (cluster.Result, error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.c.Submit(ctx, cmd)
	if err != nil && ctx.Err() != nil && !errors.Is(err, cluster.ErrNoLeader) {
		return res, fmt.Errorf("%w: %w", errTimeout, err)
	}
	return res, err
}

func (s *Server) createVolume(r *http.Request) (int, any, error) {
	var req CreateVolumeRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	if req.RF == 0 {
		req.RF = min(cluster.DefaultReplicationFactor, max(1, len(s.c.Nodes())))
	}
	cv := &cluster.CreateVolume{Name: req.Name, Size: int64(req.Size), RF: req.RF, Hosts: req.Hosts,
		AllowAnyHost: req.AllowAnyHost, Created: s.cfg.Clock.Now().UTC().Format(time.RFC3339), QoS: req.QoS}
	if req.Compression != "none" {
		cv.Compression = req.Compression
	}
	_, _ = rand.Read(cv.UUID[:])
	cv.UUID[6] = cv.UUID[6]&0x0F | 0x40 // version 4, RFC 9562
	cv.UUID[8] = cv.UUID[8]&0x3F | 0x80
	_, _ = rand.Read(cv.NGUID[:])
	if err := s.encrypt(cv, &req); err != nil {
		return 0, nil, err
	}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpCreateVolume, Create: cv})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, s.volumeView(r.Context(), res.Volume, ""), nil
}

func (s *Server) deleteVolume(r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	if _, err := s.submit(r, cluster.Command{Op: cluster.OpDeleteVolume, Volume: name}); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]string{"deleted": name}, nil
}

func (s *Server) resizeVolume(r *http.Request) (int, any, error) {
	var req ResizeRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpResizeVolume, Volume: r.PathValue("name"), Size: int64(req.Size)})
	if err != nil {
		return 0, nil, err
	}
	status, note := http.StatusOK, ""
	if res.Volume.PendingSize > res.Volume.Size {
		status, note = http.StatusAccepted, "the volume grows once every replica has grown; hosts then see a namespace change"
	}
	return status, s.volumeView(r.Context(), res.Volume, note), nil
}

func (s *Server) getLocal(*http.Request) (int, any, error) { return http.StatusOK, s.local(), nil }

// local returns this node's status and scrub schedule.
func (s *Server) local() LocalView {
	v := LocalView{LocalStatus: s.c.Local()}
	if s.cfg.Scrub != nil {
		v.Scrub = s.cfg.Scrub()
	}
	return v
}

// postCommand is where other nodes forward changes: it runs them here,
// and only here, so a request is never forwarded twice.
func (s *Server) postCommand(r *http.Request) (int, any, error) {
	var cmd cluster.Command
	if err := readBody(r, &cmd); err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.c.Propose(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, res, nil
}
