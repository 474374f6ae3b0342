package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/cluster"
)

// Peer reads: a volume's leader whose own replica cannot read a range (a
// block lost beyond its store's parity) reads it from another node's
// replica with POST /v1/internal/volumes/{group}/read. The answering node
// reads its local replica only, never through Raft, and never redirects.

// Errors a PeerReads wraps, and their statuses.
var (
	// ErrNoReplica: this node holds no replica of the group (404).
	ErrNoReplica = errors.New("api: no replica of that volume here")
	// ErrReplicaBehind: the replica had not applied the index asked for
	// within PeerReadWait (409).
	ErrReplicaBehind = errors.New("api: the replica here has not applied the index asked for")
)

// Limits of a peer read.
const (
	// PeerReadWait bounds how long the answering node waits for its
	// replica to apply the index asked for.
	PeerReadWait = 2 * time.Second
	// MaxPeerRead bounds the bytes of one peer read.
	MaxPeerRead = 16 << 20
	// ReflectsHeader carries, in the answer, the index the replica
	// reflects no entry after (volume.Volume.ReflectsAtMost).
	ReflectsHeader = "X-Basalt-Reflects"
)

// PeerReads is this node's replicas as other nodes read them (pkg/node
// implements it).
type PeerReads interface {
	// ReadReplica reads n bytes at off from the local replica of group
	// once it has applied minIndex, waiting until ctx ends at most, and
	// returns them with the index the replica reflects no entry after.
	// Errors wrap ErrNoReplica, ErrReplicaBehind, backend.ErrMedia (the
	// replica cannot read it either: 502) or a range error (400).
	ReadReplica(ctx context.Context, group cluster.GroupID, off int64, n int, minIndex uint64) ([]byte, uint64, error)
}

// PeerReadRequest is the body of POST /v1/internal/volumes/{group}/read.
type PeerReadRequest struct {
	Offset   int64  `json:"offset"`
	Length   int    `json:"length"`
	MinIndex uint64 `json:"min_index"`
}

func (s *Server) peerReadRoutes() {
	s.mux.HandleFunc("/v1/internal/volumes/{group}/read", s.peerRead)
}

// peerRead answers the bytes (application/octet-stream) with
// ReflectsHeader, or a JSON error.
func (s *Server) peerRead(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: "invalid",
			Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path), Hint: "allowed: POST"})
		return
	}
	data, hi, err := s.readReplica(r)
	if err != nil {
		e := peerReadError(err)
		if e.Status >= 500 {
			s.log.Warn("a peer read failed", "path", r.URL.Path, "err", err)
		}
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(ReflectsHeader, strconv.FormatUint(hi, 10))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (s *Server) readReplica(r *http.Request) ([]byte, uint64, error) {
	if s.cfg.PeerReads == nil {
		return nil, 0, fmt.Errorf("%w: this node serves no replicas to peers", ErrNoReplica)
	}
	group, err := strconv.ParseUint(r.PathValue("group"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: group %q: want a group ID", cluster.ErrInvalid, r.PathValue("group"))
	}
	var req PeerReadRequest
	if err := readBody(r, &req); err != nil {
		return nil, 0, err
	}
	if req.Offset < 0 || req.Length <= 0 || req.Length > MaxPeerRead {
		return nil, 0, fmt.Errorf("%w: %d bytes at %d: want 1 to %d bytes at an offset of at least 0",
			cluster.ErrInvalid, req.Length, req.Offset, MaxPeerRead)
	}
	ctx, cancel := context.WithTimeout(r.Context(), PeerReadWait)
	defer cancel()
	data, hi, err := s.cfg.PeerReads.ReadReplica(ctx, cluster.GroupID(group), req.Offset, req.Length, req.MinIndex)
	if err == nil && len(data) != req.Length {
		err = fmt.Errorf("the replica read %d bytes for %d", len(data), req.Length)
	}
	return data, hi, err
}

// peerReadError maps a peer read's error to its status.
func peerReadError(err error) *Error {
	switch {
	case errors.Is(err, ErrNoReplica):
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: err.Error()}
	case errors.Is(err, ErrReplicaBehind):
		return &Error{Status: http.StatusConflict, Code: "behind", Message: err.Error(),
			Hint: "the replica is catching up; ask another"}
	case errors.Is(err, backend.ErrMedia):
		return &Error{Status: http.StatusBadGateway, Code: "media", Message: err.Error(),
			Hint: "this replica cannot read the range either; ask another"}
	case errors.Is(err, backend.ErrOutOfRange), errors.Is(err, backend.ErrMisaligned):
		return &Error{Status: http.StatusBadRequest, Code: "invalid", Message: err.Error()}
	}
	return errorFor(err)
}

// PeerRead reads n bytes at off of group's replica on the node, once that
// replica has applied minIndex (POST /v1/internal/volumes/{group}/read).
// It returns the bytes and the index the replica reflects no entry after;
// an error status is an *Error (404 no replica there, 409 not caught up
// in time, 502 that replica's media error).
func (c *Client) PeerRead(ctx context.Context, group cluster.GroupID, off int64, n int, minIndex uint64) (
	[]byte, uint64, error) {
	body, err := json.Marshal(PeerReadRequest{Offset: off, Length: n, MinIndex: minIndex})
	if err != nil {
		return nil, 0, err
	}
	path := "/v1/internal/volumes/" + strconv.FormatUint(uint64(group), 10) + "/read"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+path, strings.NewReader(string(body)))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot reach the Basalt API at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxPeerRead+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the answer of %s: %w", c.Base, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Code, e.Message = "internal", fmt.Sprintf("POST %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return nil, 0, e
	}
	hi, err := strconv.ParseUint(resp.Header.Get(ReflectsHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("POST %s at %s: no index in %s: %w", path, c.Base, ReflectsHeader, err)
	}
	if len(b) != n {
		return nil, 0, fmt.Errorf("POST %s at %s: %d bytes for %d", path, c.Base, len(b), n)
	}
	return b, hi, nil
}
