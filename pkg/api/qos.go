package api

import (
	"context"
	"net/http"
	"net/url"

	"basalt/pkg/cluster"
)

// QoS routes: a volume's I/O limits (package qos) are set when it is
// created (CreateVolumeRequest.QoS) and changed online here; the volume's
// view shows them (VolumeView's qos, in base units: commands and bytes per
// second, bursts in commands and bytes).
//
//	POST /v1/volumes/{name}/qos   body: cluster.QoSChange   → VolumeView
//
// The body names the limits to replace, each {"rate": R, "burst": B}
// (burst 0 or absent: one second's worth); {} or {"rate": 0} removes one;
// the limits it does not name stay:
//
//	{"iops": {"rate": 20000}, "write_bytes_per_second": {"rate": 400000000, "burst": 800000000}}
//
// Every node holding a replica puts the change in force when it applies
// it; the volume's leader enforces it on the next command.

func (s *Server) qosRoutes() {
	s.route("/v1/volumes/{name}/qos", map[string]handler{"POST": s.setQoS})
}

func (s *Server) setQoS(r *http.Request) (int, any, error) {
	var change cluster.QoSChange
	if err := readBody(r, &change); err != nil {
		return 0, nil, err
	}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpSetQoS, Volume: r.PathValue("name"), QoS: &change})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.volumeView(r.Context(), res.Volume, "limits in force on the volume's leader: "+res.Volume.QoS.String()), nil
}

// SetQoS changes the limits change names on a volume and returns the
// volume with its limits.
func (c *Client) SetQoS(ctx context.Context, name string, change cluster.QoSChange) (VolumeView, error) {
	var v VolumeView
	return v, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(name)+"/qos", change, &v)
}
