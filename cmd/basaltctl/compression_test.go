package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
)

func TestCLIVolumeCompression(t *testing.T) {
	ac := newAPICluster(t, 1, 3*time.Second)
	base := ac.Nodes[0].Server.URL
	out, errs, code := ctl(t, base, "volume", "create", "z1", "--size", "4MiB", "--rf", "1", "--compression", "zstd")
	if code != 0 || !strings.Contains(out, "Compression:") || !strings.Contains(out, "zstd") {
		t.Fatalf("create: %d %s%s", code, out, errs)
	}
	out, _, code = ctl(t, base, "-o", "json", "volume", "show", "z1")
	var v api.VolumeView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Compression != "zstd" {
		t.Fatalf("show -o json: %d %s", code, out)
	}
	out, errs, code = ctl(t, base, "volume", "create", "z2", "--size", "4MiB", "--rf", "1")
	if code != 0 || !strings.Contains(out, "none") {
		t.Fatalf("create without --compression: %d %s%s", code, out, errs)
	}
	if _, errs, code := ctl(t, base, "volume", "create", "z3", "--size", "4MiB", "--compression", "gzip"); code != 2 {
		t.Errorf("--compression gzip: exit %d (%s), want 2 (usage)", code, errs)
	}
}
