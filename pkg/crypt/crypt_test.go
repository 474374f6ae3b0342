package crypt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func kekLine(t *testing.T, id string) string {
	t.Helper()
	line, err := NewKEKLine(id)
	if err != nil {
		t.Fatal(err)
	}
	return line + "\n"
}

// TestRotation: a key wrapped under the old KEK unwraps with the old and
// new keyrings; re-wrapped under the new one it unwraps once the old KEK
// is removed, and the old-only keyring cannot open it.
func TestRotation(t *testing.T) {
	oldLine, newLine := kekLine(t, "k1"), kekLine(t, "k2")
	old, err := Parse("# cluster KEKs\n" + oldLine)
	if err != nil {
		t.Fatal(err)
	}
	both, err := Parse(oldLine + newLine)
	if err != nil {
		t.Fatal(err)
	}
	newOnly, err := Parse(newLine)
	if err != nil {
		t.Fatal(err)
	}
	vol := [16]byte{1, 2, 3}
	dk, err := NewDataKey()
	if err != nil {
		t.Fatal(err)
	}
	w, id, err := old.Wrap(dk, vol)
	if err != nil || id != "k1" || len(w) != WrappedSize {
		t.Fatalf("Wrap: %d bytes under %q, %v", len(w), id, err)
	}
	if bytes.Contains(w, dk[:16]) {
		t.Fatal("the wrapping holds the data key in clear")
	}
	if both.Newest() != "k2" {
		t.Fatalf("newest %q, want the last line's k2", both.Newest())
	}
	w2, id2, err := both.Rewrap(w, id, vol)
	if err != nil || id2 != "k2" {
		t.Fatalf("Rewrap: under %q, %v", id2, err)
	}
	got, err := newOnly.Unwrap(w2, id2, vol)
	if err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("Unwrap after rotation, old KEK removed: %v", err)
	}
	if _, err := newOnly.Unwrap(w, id, vol); !errors.Is(err, ErrNoKEK) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("Unwrap under a removed KEK: %v, want ErrNoKEK naming k1", err)
	}
	if _, err := newOnly.Unwrap(w2, id2, [16]byte{9}); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("Unwrap for another volume: %v, want ErrUnwrap", err)
	}
	wrong, _ := Parse(kekLine(t, "k2"))
	if _, err := wrong.Unwrap(w2, id2, vol); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("Unwrap under another key of the same ID: %v, want ErrUnwrap", err)
	}
	if _, err := NewKeyringText("k3", "bad id"); !errors.Is(err, ErrKeyring) {
		t.Fatalf("NewKEKLine with a bad ID: %v, want ErrKeyring", err)
	}
	var none *Keyring
	if _, _, err := none.Wrap(dk, vol); !errors.Is(err, ErrNoKEK) {
		t.Fatalf("Wrap without a keyring: %v, want ErrNoKEK", err)
	}
}

// TestParseRefuses malformed keyrings, without quoting key material.
func TestParseRefuses(t *testing.T) {
	good := kekLine(t, "k1")
	secret := strings.Fields(good)[1]
	for name, text := range map[string]string{
		"empty":      "# nothing\n",
		"short key":  "k1 " + secret[:62] + "\n",
		"not hex":    "k1 " + strings.Repeat("zz", 32) + "\n",
		"no key":     "k1\n",
		"bad id":     "k/1 " + secret + "\n",
		"twice":      good + good,
		"extra word": "k1 " + secret + " x\n",
	} {
		_, err := Parse(text)
		if !errors.Is(err, ErrKeyring) {
			t.Errorf("%s: %v, want ErrKeyring", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret[:16]) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

// TestLoadChecksMode: a keyring file others can read is refused.
func TestLoadChecksMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, []byte(kekLine(t, "k1")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("Load of a 0644 file: %v, want ErrKeyring saying chmod 600", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := Load(path)
	if err != nil || k.Newest() != "k1" {
		t.Fatalf("Load: %v", err)
	}
	if _, err := Load(path + "-missing"); !errors.Is(err, ErrKeyring) {
		t.Fatalf("Load of a missing file: %v", err)
	}
}
