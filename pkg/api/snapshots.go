package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"basalt/pkg/cluster"
)

// Snapshot routes (docs/ARCHITECTURE.md, "Snapshots and clones"):
//
//	GET    /v1/volumes/{name}/snapshots              → SnapshotsView
//	POST   /v1/volumes/{name}/snapshots        body: CreateSnapshotRequest → 201 SnapshotView
//	DELETE /v1/volumes/{name}/snapshots/{snap}       → SnapshotsView
//	POST   /v1/volumes/{name}/rollback         body: RollbackRequest → SnapshotsView
//
// Each is an operation of the volume's own Raft group, run by the node
// that leads it: the node asked tries the volume's replicas in turn (its
// own through cluster.LocalSnapshot, the others' through
// POST /v1/internal/volumes/{group}/snapshots, for nodes only) until the
// leader answers. A rollback is refused (409) while any node reports a
// host controller connected to the volume, unless forced.

// CreateSnapshotRequest is the body of POST /v1/volumes/{name}/snapshots.
type CreateSnapshotRequest struct {
	Name string `json:"name"`
}

// RollbackRequest is the body of POST /v1/volumes/{name}/rollback.
type RollbackRequest struct {
	Snapshot string `json:"snapshot"`
	// Force rolls back even while hosts are connected: they then read the
	// snapshot's data under their caches' feet.
	Force bool `json:"force,omitempty"`
}

// SnapshotView is one snapshot of a volume.
type SnapshotView struct {
	Volume string `json:"volume"`
	cluster.SnapshotStatus
}

// SnapshotsView lists a volume's snapshots, the oldest first.
type SnapshotsView struct {
	Volume    string                   `json:"volume"`
	Snapshots []cluster.SnapshotStatus `json:"snapshots"`
}

// snapshotAttempt bounds one node's answer to a forwarded operation.
const snapshotAttempt = 5 * time.Second

func (s *Server) snapshotRoutes() {
	s.route("/v1/volumes/{name}/snapshots", map[string]handler{"GET": s.listSnapshots, "POST": s.createSnapshot})
	s.route("/v1/volumes/{name}/snapshots/{snap}", map[string]handler{"DELETE": s.deleteSnapshot})
	s.route("/v1/volumes/{name}/rollback", map[string]handler{"POST": s.rollback})
	s.route("/v1/internal/volumes/{group}/snapshots", map[string]handler{"POST": s.localSnapshot})
}

func (s *Server) listSnapshots(r *http.Request) (int, any, error) {
	return s.snapshotsView(r, cluster.SnapshotRequest{Op: cluster.SnapshotList})
}

func (s *Server) createSnapshot(r *http.Request) (int, any, error) {
	var req CreateSnapshotRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	_, list, err := s.snapshotsView(r, cluster.SnapshotRequest{Op: cluster.SnapshotCreate, Name: req.Name})
	if err != nil {
		return 0, nil, err
	}
	view := list.(SnapshotsView)
	for _, sn := range view.Snapshots {
		if sn.Name == req.Name {
			return http.StatusCreated, SnapshotView{Volume: view.Volume, SnapshotStatus: sn}, nil
		}
	}
	return 0, nil, fmt.Errorf("snapshot %q of %q was taken but is not listed", req.Name, view.Volume)
}

func (s *Server) deleteSnapshot(r *http.Request) (int, any, error) {
	return s.snapshotsView(r, cluster.SnapshotRequest{Op: cluster.SnapshotDelete, Name: r.PathValue("snap")})
}

func (s *Server) rollback(r *http.Request) (int, any, error) {
	var req RollbackRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	if !req.Force {
		if err := s.noHostConnected(r.Context(), r.PathValue("name")); err != nil {
			return 0, nil, err
		}
	}
	return s.snapshotsView(r, cluster.SnapshotRequest{Op: cluster.SnapshotRollback, Name: req.Snapshot})
}

// noHostConnected refuses a rollback while a node reports a host
// controller connected to the volume (or cannot be asked).
func (s *Server) noHostConnected(ctx context.Context, name string) error {
	v := s.c.State().Volumes[name]
	if v == nil {
		return fmt.Errorf("%w: volume %q", cluster.ErrNotFound, name)
	}
	sv := s.gather(ctx)
	for _, id := range v.Replicas {
		if e, ok := sv.errs[id]; ok {
			return fmt.Errorf("%w: rollback of %q: node %d cannot say whether a host is connected (%s); "+
				"disconnect the hosts and pass force to roll back anyway", cluster.ErrRefused, name, id, e)
		}
		if vs, ok := sv.volumeStatus(id, v.ID); ok && vs.Controllers > 0 {
			return fmt.Errorf("%w: rollback of %q: %d host controller(s) connected through node %d; "+
				"disconnect them first (nvme disconnect -n %s), or pass force", cluster.ErrRefused, name, vs.Controllers, id, v.NQN())
		}
	}
	return nil
}

// snapshotsView runs req on the volume's leader and lists the snapshots.
func (s *Server) snapshotsView(r *http.Request, req cluster.SnapshotRequest) (int, any, error) {
	name := r.PathValue("name")
	v := s.c.State().Volumes[name]
	if v == nil {
		return 0, nil, fmt.Errorf("%w: volume %q", cluster.ErrNotFound, name)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	list, err := s.onVolumeLeader(ctx, v, req)
	if err != nil {
		return 0, nil, err
	}
	if list == nil {
		list = []cluster.SnapshotStatus{}
	}
	return http.StatusOK, SnapshotsView{Volume: name, Snapshots: list}, nil
}

// onVolumeLeader runs req on the node of v's replicas that leads its
// group: this node's replica first, then the others', skipping those that
// do not lead it or cannot be reached.
func (s *Server) onVolumeLeader(ctx context.Context, v *cluster.Volume, req cluster.SnapshotRequest) (
	[]cluster.SnapshotStatus, error) {
	self := s.c.Self().ID
	order := append([]cluster.NodeID{self}, v.Replicas...)
	var errs []error
	for i, id := range order {
		if i > 0 && id == self {
			continue
		}
		list, err := s.snapshotAt(ctx, id, v.ID, req)
		var ae *Error
		switch {
		case err == nil:
			return list, nil
		case errors.Is(err, cluster.ErrNoReplicaHere) && id == self:
			continue
		case errors.Is(err, cluster.ErrNoReplicaHere), errors.Is(err, cluster.ErrNotVolumeLeader),
			!errors.As(err, &ae) && id != self:
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
		default:
			return nil, err
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: volume %q: none of its replicas is up yet", cluster.ErrNotVolumeLeader, v.Name)
	}
	return nil, fmt.Errorf("%w: volume %q: no replica leads its group now: %w",
		cluster.ErrNotVolumeLeader, v.Name, errors.Join(errs...))
}

// snapshotAt runs req on node id's replica of group.
func (s *Server) snapshotAt(ctx context.Context, id cluster.NodeID, group cluster.GroupID, req cluster.SnapshotRequest) (
	[]cluster.SnapshotStatus, error) {
	if id == s.c.Self().ID {
		return s.c.LocalSnapshot(ctx, group, req)
	}
	n, ok := s.c.Node(id)
	if !ok || n.APIAddr == "" {
		return nil, fmt.Errorf("no API address known")
	}
	actx, cancel := context.WithTimeout(ctx, snapshotAttempt)
	defer cancel()
	return s.cfg.Client.At(n.APIAddr).LocalSnapshot(actx, group, req)
}

// localSnapshot answers POST /v1/internal/volumes/{group}/snapshots: req on
// this node's replica only (never forwarded).
func (s *Server) localSnapshot(r *http.Request) (int, any, error) {
	group, err := strconv.ParseUint(r.PathValue("group"), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: group %q: want a group ID", cluster.ErrInvalid, r.PathValue("group"))
	}
	var req cluster.SnapshotRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	list, err := s.c.LocalSnapshot(r.Context(), cluster.GroupID(group), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, list, nil
}

func snapshotsPath(volume string) string {
	return "/v1/volumes/" + url.PathEscape(volume) + "/snapshots"
}

// CreateSnapshot takes the snapshot name of a volume.
func (c *Client) CreateSnapshot(ctx context.Context, volume, name string) (SnapshotView, error) {
	var v SnapshotView
	return v, c.do(ctx, "POST", snapshotsPath(volume), CreateSnapshotRequest{Name: name}, &v)
}

// Snapshots lists a volume's snapshots, the oldest first.
func (c *Client) Snapshots(ctx context.Context, volume string) (SnapshotsView, error) {
	var v SnapshotsView
	return v, c.do(ctx, "GET", snapshotsPath(volume), nil, &v)
}

// DeleteSnapshot deletes a volume's snapshot and lists those left.
func (c *Client) DeleteSnapshot(ctx context.Context, volume, name string) (SnapshotsView, error) {
	var v SnapshotsView
	return v, c.do(ctx, "DELETE", snapshotsPath(volume)+"/"+url.PathEscape(name), nil, &v)
}

// Rollback rolls a volume back to its snapshot.
func (c *Client) Rollback(ctx context.Context, volume, snapshot string, force bool) (SnapshotsView, error) {
	var v SnapshotsView
	return v, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(volume)+"/rollback",
		RollbackRequest{Snapshot: snapshot, Force: force}, &v)
}

// LocalSnapshot runs req on the node's own replica of group
// (POST /v1/internal/volumes/{group}/snapshots; node certificates only).
func (c *Client) LocalSnapshot(ctx context.Context, group cluster.GroupID, req cluster.SnapshotRequest) (
	[]cluster.SnapshotStatus, error) {
	var out []cluster.SnapshotStatus
	return out, c.do(ctx, "POST", "/v1/internal/volumes/"+strconv.FormatUint(uint64(group), 10)+"/snapshots", req, &out)
}
