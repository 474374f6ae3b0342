package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"basalt/pkg/cluster"
)

// ErrDriveState is what a DriveManager wraps when the slot's state does not
// allow the change (replacing a drive that has not failed): 409 conflict.
var ErrDriveState = errors.New("api: the drive slot is in the wrong state for that")

// DriveManager is this node's view of its store's drives, as the drive
// endpoints need it (pkg/node implements it). Its errors wrap the cluster
// sentinels: cluster.ErrInvalid for a slot that does not exist or a
// replacement that does not fit or cannot be opened; ErrDriveState for a
// slot in the wrong state.
type DriveManager interface {
	// Drives returns every drive slot and the rebuild's progress.
	Drives() DrivesView
	// FailDrive takes the drive in slot out: its data is served from
	// parity and the background rebuild re-protects it.
	FailDrive(slot int) error
	// ReplaceDrive opens the drive file at path and puts it into slot,
	// whose drive has failed, then starts its rebuild.
	ReplaceDrive(slot int, path string) error
}

// DriveView is one drive slot in GET /v1/drives.
type DriveView struct {
	Slot int    `json:"slot"`
	Path string `json:"path"`
	UUID string `json:"uuid"`
	// Size is in bytes.
	Size int64 `json:"size"`
	// State is "healthy", "failed", "rebuilding" (a replacement being
	// filled) or "evacuated" (failed, its data re-striped on the others).
	State  string `json:"state"`
	Reads  uint64 `json:"reads"`
	Writes uint64 `json:"writes"`
	Errors uint64 `json:"errors"`
}

// RebuildView is the progress of this node's rebuild: the pass running, or
// the last one. Bytes count its drive I/O (reads and writes).
type RebuildView struct {
	Running         bool      `json:"running"`
	Drives          []int     `json:"drives,omitempty"`
	SegmentsDone    int       `json:"segments_done"`
	SegmentsTotal   int       `json:"segments_total"`
	SegmentsSkipped int       `json:"segments_skipped"`
	BytesDone       int64     `json:"bytes_done"`
	BytesTotal      int64     `json:"bytes_total"`
	BytesPerSecond  float64   `json:"bytes_per_second"`
	ETASeconds      float64   `json:"eta_seconds"`
	RateLimit       int64     `json:"rate_limit_bytes_per_second"`
	Started         time.Time `json:"started,omitzero"`
	Finished        time.Time `json:"finished,omitzero"`
	Passes          uint64    `json:"passes"`
	LastError       string    `json:"last_error,omitempty"`
}

// DrivesView answers GET /v1/drives and the drive changes.
type DrivesView struct {
	Drives  []DriveView `json:"drives"`
	Rebuild RebuildView `json:"rebuild"`
	// Note says what to do next, after a change.
	Note string `json:"note,omitempty"`
}

// ReplaceDriveRequest is the body of POST /v1/drives/{slot}/replace.
type ReplaceDriveRequest struct {
	Path string `json:"path"`
}

func (s *Server) driveRoutes() {
	s.route("/v1/drives", map[string]handler{"GET": s.listDrives})
	s.route("/v1/drives/{slot}/fail", map[string]handler{"POST": s.failDrive})
	s.route("/v1/drives/{slot}/replace", map[string]handler{"POST": s.replaceDrive})
}

func (s *Server) drives() (DriveManager, error) {
	if s.cfg.Drives == nil {
		return nil, fmt.Errorf("%w: this node has no [store] drives", cluster.ErrUnsupported)
	}
	return s.cfg.Drives, nil
}

func (s *Server) listDrives(*http.Request) (int, any, error) {
	dm, err := s.drives()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, dm.Drives(), nil
}

func slotOf(r *http.Request) (int, error) {
	slot, err := strconv.Atoi(r.PathValue("slot"))
	if err != nil || slot < 0 {
		return 0, fmt.Errorf("%w: drive slot %q: want a slot number from GET /v1/drives", cluster.ErrInvalid,
			r.PathValue("slot"))
	}
	return slot, nil
}

func (s *Server) failDrive(r *http.Request) (int, any, error) {
	dm, err := s.drives()
	if err != nil {
		return 0, nil, err
	}
	slot, err := slotOf(r)
	if err != nil {
		return 0, nil, err
	}
	if err := dm.FailDrive(slot); err != nil {
		return 0, nil, driveError(err)
	}
	v := dm.Drives()
	v.Note = fmt.Sprintf("drive %d is out; its data is served from parity while the rebuild re-protects it. "+
		"Replace it with: basaltctl drive replace %d PATH", slot, slot)
	return http.StatusOK, v, nil
}

func (s *Server) replaceDrive(r *http.Request) (int, any, error) {
	dm, err := s.drives()
	if err != nil {
		return 0, nil, err
	}
	slot, err := slotOf(r)
	if err != nil {
		return 0, nil, err
	}
	var req ReplaceDriveRequest
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Path == "" {
		return 0, nil, fmt.Errorf("%w: the body needs the replacement's path: {\"path\": \"/dev/...\"}", cluster.ErrInvalid)
	}
	if err := dm.ReplaceDrive(slot, req.Path); err != nil {
		return 0, nil, driveError(err)
	}
	v := dm.Drives()
	v.Note = fmt.Sprintf("drive %d is now %s and rebuilding; put that path into [store] drives of this node's "+
		"configuration, so that it is opened there at the next start", slot, req.Path)
	return http.StatusAccepted, v, nil
}

func driveError(err error) error {
	if errors.Is(err, ErrDriveState) {
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: err.Error(),
			Hint: "only a failed drive can be replaced: see basaltctl drive list, and fail it first if it must go"}
	}
	return err
}

// Drives returns the node's drives and its rebuild's progress.
func (c *Client) Drives(ctx context.Context) (DrivesView, error) {
	var v DrivesView
	return v, c.do(ctx, "GET", "/v1/drives", nil, &v)
}

// FailDrive takes the drive in slot out of service.
func (c *Client) FailDrive(ctx context.Context, slot int) (DrivesView, error) {
	var v DrivesView
	return v, c.do(ctx, "POST", "/v1/drives/"+strconv.Itoa(slot)+"/fail", nil, &v)
}

// ReplaceDrive puts the drive file at path into slot and starts its rebuild.
func (c *Client) ReplaceDrive(ctx context.Context, slot int, path string) (DrivesView, error) {
	var v DrivesView
	return v, c.do(ctx, "POST", "/v1/drives/"+strconv.Itoa(slot)+"/replace", ReplaceDriveRequest{Path: path}, &v)
}
