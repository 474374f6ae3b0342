package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestBlockLostBeyondParityIsReadFromAPeer destroys, on the leader's three
// drives, the whole stripe row that holds a written block (more chunks
// than the store's one parity chunk covers), so that the leader's own
// replica can only answer Unrecovered Read Error for it. The host's read
// must still return the block, served from another replica; the leader
// counts it (basalt_volume_peer_repairs_total), repairs its own copy
// through Raft, and serves the next read of it locally.
func TestBlockLostBeyondParityIsReadFromAPeer(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3, store: true, driveSize: "64MiB"})
	v := tc.createVolume("peer", 64<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const blocks, chunk = 512, 32 // 2 MiB in 128 KiB writes: full stripes reach the drives
	for lba := uint64(0); lba < blocks; lba += chunk {
		var b []byte
		for i := range uint64(chunk) {
			b = append(b, block(lba+i, 1)...)
		}
		if err := mp.Write(ctx, 1, lba, b, false); err != nil {
			t.Fatal(err)
		}
	}
	leader := tc.leaderOf("peer")
	const target = 100
	var off int64
	tc.eventually(30*time.Second, "block 100 is on the leader's drives", func() bool {
		var err error
		off, err = findBlock(leader, block(target, 1))
		if err != nil {
			t.Fatal(err)
		}
		return off >= 0
	})
	time.Sleep(time.Second) // the destaged version replaces the staged one in the store's overlay
	if n := peerRepairs(t, tc, leader, "peer"); n != 0 {
		t.Fatalf("peer repairs before any loss: %d", n)
	}
	garbage := make([]byte, 4096)
	for d := range 3 { // the block's row on every drive: its chunk, the other data chunk, the parity
		_, _ = rand.Read(garbage)
		writeAt(t, filepath.Join(leader.dir, fmt.Sprintf("d%d", d)), garbage, off)
	}
	t.Logf("destroyed the row at drive offset %d on node%d's three drives", off, leader.id)

	got := make([]byte, 4096)
	if err := mp.Read(ctx, 1, target, got); err != nil {
		t.Fatalf("reading the block lost beyond parity: %v", err)
	}
	if !bytes.Equal(got, block(target, 1)) {
		t.Fatal("the block read back is not the one written")
	}
	repairs := peerRepairs(t, tc, leader, "peer")
	if repairs < 1 {
		t.Fatal("the read was not counted as served by a peer: was the block still in the overlay?")
	}
	all := make([]byte, blocks*4096)
	for lba := uint64(0); lba < blocks; lba += chunk {
		if err := mp.Read(ctx, 1, lba, all[lba*4096:(lba+chunk)*4096]); err != nil {
			t.Fatalf("reading blocks %d+%d: %v", lba, chunk, err)
		}
	}
	for lba := range uint64(blocks) {
		if !bytes.Equal(all[lba*4096:(lba+1)*4096], block(lba, 1)) {
			t.Fatalf("block %d does not read back as written", lba)
		}
	}
	repairs = peerRepairs(t, tc, leader, "peer")
	time.Sleep(time.Second) // the repairs commit and apply
	if err := mp.Read(ctx, 1, target, got); err != nil || !bytes.Equal(got, block(target, 1)) {
		t.Fatalf("reading the block again: %v", err)
	}
	if n := peerRepairs(t, tc, leader, "peer"); n != repairs {
		t.Fatalf("the read after the repair went to a peer again (%d peer reads, %d before)", n, repairs)
	}
	t.Logf("%d reads served by a peer", repairs)
	tc.waitHealthy("peer", 10*time.Second)
}

// findBlock returns the offset of a 4 KiB-aligned copy of b on one of n's
// drives, or -1.
func findBlock(n *node, b []byte) (int64, error) {
	buf := make([]byte, 1<<20)
	for d := range 3 {
		f, err := os.Open(filepath.Join(n.dir, fmt.Sprintf("d%d", d)))
		if err != nil {
			return -1, err
		}
		for pos := int64(0); ; pos += int64(len(buf)) {
			k, err := f.ReadAt(buf, pos)
			for i := 0; i+4096 <= k; i += 4096 {
				if bytes.Equal(buf[i:i+4096], b) {
					f.Close()
					return pos + int64(i), nil
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return -1, err
			}
		}
		f.Close()
	}
	return -1, nil
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// peerRepairs scrapes n's basalt_volume_peer_repairs_total for volume.
func peerRepairs(t *testing.T, tc *testCluster, n *node, volume string) int {
	t.Helper()
	resp, err := tc.sec.get(n.api, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^basalt_volume_peer_repairs_total\{volume="` + regexp.QuoteMeta(volume) + `"\} (\d+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		t.Fatalf("node%d's metrics have no basalt_volume_peer_repairs_total for %s", n.id, volume)
	}
	v, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
