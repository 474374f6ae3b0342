package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"

	"basalt/pkg/api"
	"basalt/pkg/backend"
	"basalt/pkg/cluster"
)

// fakeReplicas is a PeerReads over one in-memory replica of group 7 whose
// applied index is applied; block 3 cannot be read.
type fakeReplicas struct {
	mu      sync.Mutex
	data    []byte
	applied uint64
	asked   []string
}

func (f *fakeReplicas) ReadReplica(ctx context.Context, group cluster.GroupID, off int64, n int, minIndex uint64) (
	[]byte, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, fmt.Sprintf("%d %d+%d@%d", group, off, n, minIndex))
	switch {
	case group != 7:
		return nil, 0, fmt.Errorf("group %d: %w", group, api.ErrNoReplica)
	case off%4096 != 0 || n%4096 != 0:
		return nil, 0, fmt.Errorf("test: %w", backend.ErrMisaligned)
	case off+int64(n) > int64(len(f.data)):
		return nil, 0, fmt.Errorf("test: %w", backend.ErrOutOfRange)
	case minIndex > f.applied:
		<-ctx.Done() // the server bounds the wait
		return nil, 0, fmt.Errorf("test: %w", api.ErrReplicaBehind)
	case off < 4*4096 && off+int64(n) > 3*4096:
		return nil, 0, fmt.Errorf("test: block 3: %w", backend.ErrMedia)
	}
	return bytes.Clone(f.data[off : off+int64(n)]), f.applied + 2, nil
}

func TestPeerReadRoute(t *testing.T) {
	f := &fakeReplicas{data: make([]byte, 16*4096), applied: 40}
	for i := range f.data {
		f.data[i] = byte(i / 4096)
	}
	srv := httptest.NewServer(api.NewServer(api.Config{PeerReads: f}))
	defer srv.Close()
	cl := api.NewClient(srv.URL)

	got, hi, err := cl.PeerRead(ctx(t), 7, 4*4096, 2*4096, 40)
	if err != nil || hi != 42 || !bytes.Equal(got, f.data[4*4096:6*4096]) {
		t.Fatalf("PeerRead: %v, reflects %d, equal %v", err, hi, bytes.Equal(got, f.data[4*4096:6*4096]))
	}
	if f.asked[0] != "7 16384+8192@40" {
		t.Fatalf("the replica was asked %q", f.asked[0])
	}
	for _, tt := range []struct {
		name   string
		group  cluster.GroupID
		off    int64
		n      int
		min    uint64
		status int
		code   string
	}{
		{"no replica of the group", 8, 0, 4096, 0, 404, "not_found"},
		{"behind the index asked for", 7, 0, 4096, 41, 409, "behind"},
		{"the replica's own media error", 7, 2 * 4096, 2 * 4096, 0, 502, "media"},
		{"past the end", 7, 15 * 4096, 2 * 4096, 0, 400, "invalid"},
		{"misaligned", 7, 100, 4096, 0, 400, "invalid"},
		{"no bytes", 7, 0, 0, 0, 400, "invalid"},
		{"too many bytes", 7, 0, api.MaxPeerRead + 4096, 0, 400, "invalid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := cl.PeerRead(ctx(t), tt.group, tt.off, tt.n, tt.min)
			if !isCode(err, tt.code, tt.status) {
				t.Fatalf("PeerRead: %v, want %d %s", err, tt.status, tt.code)
			}
		})
	}
	checkStatus(t, srv.URL, "GET", "/v1/internal/volumes/7/read", "", 405, "invalid")
	checkStatus(t, srv.URL, "POST", "/v1/internal/volumes/x/read", `{"offset":0,"length":4096}`, 400, "invalid")
	checkStatus(t, srv.URL, "POST", "/v1/internal/volumes/7/read", `{"offset":0,"length":4096,"x":1}`, 400, "invalid")
}

func TestPeerReadRouteWithoutReplicas(t *testing.T) {
	srv := httptest.NewServer(api.NewServer(api.Config{}))
	defer srv.Close()
	_, _, err := api.NewClient(srv.URL).PeerRead(ctx(t), 7, 0, 4096, 0)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("PeerRead on a node without PeerReads: %v, want 404", err)
	}
}
