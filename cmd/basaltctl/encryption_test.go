package main

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"basalt/pkg/cluster/clustertest"
	"basalt/pkg/crypt"
)

// keyring parses a keyring of the given lines (id → key hex).
func keyring(t *testing.T, lines ...string) *crypt.Keyring {
	t.Helper()
	k, err := crypt.Parse(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// squeeze collapses the runs of spaces and tabs of a table into one space.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

func kekLine(t *testing.T, id string) string {
	t.Helper()
	line, err := crypt.NewKEKLine(id)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// TestCLIVolumeEncryption: volume create --encryption aes-xts-256 shows
// the encryption and KEK, never a key; cluster rotate-kek re-wraps under
// the newest KEK, after which the old one can go; an unknown encryption
// and a rotation without a keyring are refused with what to do.
func TestCLIVolumeEncryption(t *testing.T) {
	k1, k2 := kekLine(t, "k1"), kekLine(t, "k2")
	ac := clustertest.NewAPIClusterWithKeys(t, 1, 3*time.Second, keyring(t, k1))
	secured.Store(ac.Nodes[0].Server.URL, ac.Sec)
	t.Cleanup(func() { secured.Delete(ac.Nodes[0].Server.URL) })
	base := ac.Nodes[0].Server.URL
	out, errs, code := ctl(t, base, "volume", "create", "sec", "--size", "4MiB", "--rf", "1", "--encryption", "aes-xts-256")
	if code != 0 || !strings.Contains(squeeze(out), "Encryption: aes-xts-256 (data key wrapped under KEK k1)") {
		t.Fatalf("create: %d %s%s", code, out, errs)
	}
	out, _, code = ctl(t, base, "-o", "json", "volume", "show", "sec")
	if code != 0 || !strings.Contains(out, `"encryption": "aes-xts-256"`) || strings.Contains(out, "wrapped") {
		t.Fatalf("show -o json: %d %s", code, out)
	}
	if out, _, code = ctl(t, base, "volume", "create", "plain", "--size", "4MiB", "--rf", "1"); code != 0 ||
		!strings.Contains(squeeze(out), "Encryption: none") {
		t.Fatalf("create without encryption: %d %s", code, out)
	}
	v := ac.Nodes[0].Cluster.State().Volumes["sec"]
	dk, err := keyring(t, k1).Unwrap(v.WrappedKey, v.KEK, v.UUID)
	if err != nil {
		t.Fatal(err)
	}

	ac.Nodes[0].Cluster.SetKeys(keyring(t, k1, k2)) // k2 added to the keyring file
	out, errs, code = ctl(t, base, "cluster", "rotate-kek")
	if code != 0 || !strings.Contains(out, `wrapped under "k2"; re-wrapped now: sec`) {
		t.Fatalf("rotate-kek: %d %s%s", code, out, errs)
	}
	v = ac.Nodes[0].Cluster.State().Volumes["sec"]
	got, err := keyring(t, k2).Unwrap(v.WrappedKey, v.KEK, v.UUID) // k1 retired
	if v.KEK != "k2" || err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("after rotation: under %q, %v", v.KEK, err)
	}
	if out, _, code = ctl(t, base, "cluster", "rotate-kek"); code != 0 || !strings.Contains(out, "re-wrapped now: none") {
		t.Fatalf("second rotate-kek: %d %s", code, out)
	}
	if logs := ac.Logs.String(); strings.Contains(logs, hex.EncodeToString(dk[:8])) {
		t.Fatal("a data key was logged")
	}

	if _, errs, code = ctl(t, base, "volume", "create", "x", "--size", "4MiB", "--encryption", "des"); code == 0 ||
		!strings.Contains(errs, "aes-xts-256") {
		t.Fatalf("create with encryption des: %d %s", code, errs)
	}
	ac.Nodes[0].Cluster.SetKeys(nil)
	if _, errs, code = ctl(t, base, "cluster", "rotate-kek"); code == 0 || !strings.Contains(errs, "security.kek_file") {
		t.Fatalf("rotate-kek without a keyring: %d %s", code, errs)
	}
	if _, errs, code = ctl(t, base, "volume", "create", "y", "--size", "4MiB", "--encryption", "aes-xts-256"); code == 0 ||
		!strings.Contains(errs, "security.kek_file") {
		t.Fatalf("encrypted create without a keyring: %d %s", code, errs)
	}
}
