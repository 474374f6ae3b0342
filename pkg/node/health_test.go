package node

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
)

// A drive lost in a cluster node's store reaches the SMART / Health log of
// every volume's namespace, through the whole chain the target sees: the
// cluster's export, the metrics wrapper, the replicated volume and the
// store replica (backend.HealthReporter forwarded by each).
func TestStoreDriveFailureReachesSMARTLog(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true) // 3 drives: 2+1
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := adminClient(t, cfg, n.APIAddr().String())
	var v api.VolumeView
	for {
		v, err = client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v", Size: 8 << 20, Hosts: []string{testHostNQN}})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // until the node registered itself
	}
	if err != nil {
		t.Fatal(err)
	}
	var c *host.Controller
	for c == nil {
		if c, err = host.Dial(ctx, cfg.NVMe.Advertise, host.Options{SubNQN: v.NQN, HostNQN: testHostNQN}); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer c.Close()
	smart := func() nvme.SMARTLog {
		t.Helper()
		buf := make([]byte, nvme.SMARTLogSize)
		if err := c.GetLogPage(ctx, nvme.LogSMART, 1, 0, 0, buf); err != nil {
			t.Fatal(err)
		}
		return nvme.UnmarshalSMARTLog(buf)
	}
	if s := smart(); s.CriticalWarning != 0 || s.AvailableSpare != 100 || s.CompositeTemp == 0 {
		t.Fatalf("healthy store: %+v", s)
	}
	if err := n.cl.store.FailDrive(1); err != nil {
		t.Fatal(err)
	}
	s := smart()
	if s.CriticalWarning&(nvme.SMARTWarnSpare|nvme.SMARTWarnReliability) != nvme.SMARTWarnSpare|nvme.SMARTWarnReliability ||
		s.AvailableSpare >= s.SpareThreshold {
		t.Fatalf("one drive of 3 lost (parity 1): %+v", s)
	}
}
