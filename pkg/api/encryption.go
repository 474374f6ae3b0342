package api

import (
	"context"
	"net/http"

	"basalt/pkg/cluster"
)

// Encryption at rest: a volume is created encrypted with
// CreateVolumeRequest's "encryption": "aes-xts-256" (its data key drawn
// and wrapped under the cluster's newest key-encryption key by the node
// that takes the request; cluster encryption.go); its view shows
// "encryption" and "kek" (the ID of the KEK its key is wrapped under),
// never a key. Rotation:
//
//	POST /v1/cluster/rotate-kek   → RotateKEKView
//
// re-wraps every encrypted volume's data key under the newest KEK of the
// answering node's keyring (security.kek_file), in one metadata command;
// no data is rewritten. Once it answered, the older KEKs can be removed
// from every node's keyring.

// RotateKEKView answers POST /v1/cluster/rotate-kek.
type RotateKEKView struct {
	// KEK is the ID every encrypted volume's key is now wrapped under.
	KEK string `json:"kek"`
	// Rewrapped names the volumes whose key this rotation re-wrapped.
	Rewrapped []string `json:"rewrapped"`
}

func (s *Server) encryptionRoutes() {
	s.route("/v1/cluster/rotate-kek", map[string]handler{"POST": s.rotateKEK})
}

func (s *Server) rotateKEK(r *http.Request) (int, any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	names, err := s.c.RotateKEK(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, RotateKEKView{KEK: s.c.NewestKEK(), Rewrapped: names}, nil
}

// encrypt sets up a create command for the request's encryption.
func (s *Server) encrypt(cv *cluster.CreateVolume, req *CreateVolumeRequest) error {
	return s.c.Encrypt(cv, req.Encryption)
}

// RotateKEK re-wraps every encrypted volume's data key under the newest
// key-encryption key of the answering node's keyring.
func (c *Client) RotateKEK(ctx context.Context) (RotateKEKView, error) {
	var v RotateKEKView
	return v, c.do(ctx, "POST", "/v1/cluster/rotate-kek", nil, &v)
}
