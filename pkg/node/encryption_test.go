package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"basalt/pkg/cluster"
	"basalt/pkg/store"
)

func openTestStore(t *testing.T, p store.Paths) *store.Store {
	t.Helper()
	s, err := store.OpenPaths(p, store.Options{ChunkSize: 16 << 10, SegmentStripes: 4, BatchStripes: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoreReplicasEncrypted: a replica opened encrypted keeps its data
// off the drive files in clear, is opened again after a restart with its
// key (the store keeps none), refuses another key, and a replica in clear
// is not taken for an encrypted one.
func TestStoreReplicasEncrypted(t *testing.T) {
	dir := t.TempDir()
	p := store.Paths{Buffer: filepath.Join(dir, "buffer"), BufferSize: 1 << 20, MetaDir: filepath.Join(dir, "meta"),
		DriveSize: 8 << 20}
	for i := range 4 {
		p.Drives = append(p.Drives, filepath.Join(dir, fmt.Sprintf("drive%d", i)))
	}
	key := make([]byte, store.XTSKeySize)
	_, _ = rand.Read(key)
	pattern := bytes.Repeat([]byte("NODE-ENCRYPTED-REPLICA-"), 16*4096/23+1)[:16*4096]
	ctx := context.Background()

	s := openTestStore(t, p)
	r := storeReplicas{s: s}
	rep, err := r.OpenEncrypted("vol-1", 1<<20, cluster.EncryptionAESXTS256, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteAt(ctx, pattern, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open("plain-1", 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenEncrypted("plain-1", 1<<20, cluster.EncryptionAESXTS256, key); err == nil ||
		!strings.Contains(err.Error(), "encryption") {
		t.Fatalf("a replica in clear opened encrypted: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range p.Drives {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, pattern[:64]) {
			t.Fatalf("%s holds the encrypted replica's plaintext", path)
		}
	}

	s = openTestStore(t, p)
	defer s.Close()
	r = storeReplicas{s: s}
	other := bytes.Clone(key)
	other[0] ^= 1
	if _, err := r.OpenEncrypted("vol-1", 1<<20, cluster.EncryptionAESXTS256, other); !errors.Is(err, store.ErrWrongKey) {
		t.Fatalf("reopened with another key: %v, want store.ErrWrongKey", err)
	}
	rep, err = r.OpenEncrypted("vol-1", 1<<20, cluster.EncryptionAESXTS256, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(pattern))
	if err := rep.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, pattern) {
		t.Fatalf("read after the restart: %v (equal %v)", err, bytes.Equal(got, pattern))
	}
}

// TestLoadKeyring: none configured is no keyring; a file others can read
// is refused, naming the setting.
func TestLoadKeyring(t *testing.T) {
	if k, err := loadKeyring(""); k != nil || err != nil {
		t.Fatalf("no kek_file: %v, %v", k, err)
	}
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, []byte("k1 "+strings.Repeat("ab", 32)+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := loadKeyring(path); err == nil || !strings.Contains(err.Error(), "security.kek_file") {
		t.Fatalf("a group-readable keyring: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := loadKeyring(path); err != nil || k.Newest() != "k1" {
		t.Fatalf("loadKeyring: %v", err)
	}
}
