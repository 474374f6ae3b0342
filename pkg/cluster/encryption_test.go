package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"

	"basalt/pkg/crypt"
)

func testKeyring(t *testing.T, ids ...string) *crypt.Keyring {
	t.Helper()
	text, err := crypt.NewKeyringText(ids...)
	if err != nil {
		t.Fatal(err)
	}
	k, err := crypt.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestEncryptedVolumeMetadata: a create with a wrapped key records it, the
// public view hides it, a rewrap applies only from the KEK it names, and
// malformed encryption fields are refused.
func TestEncryptedVolumeMetadata(t *testing.T) {
	keys := testKeyring(t, "k1")
	c := create("sec", 1)
	_, _ = rand.Read(c.Create.UUID[:])
	cl := &Cluster{}
	cl.SetKeys(keys)
	if err := cl.Encrypt(c.Create, EncryptionAESXTS256); err != nil {
		t.Fatal(err)
	}
	m := machineWith(t, &MemoryPersister{}, register(1), c)
	v := m.State().Volumes["sec"]
	if v.Encryption != EncryptionAESXTS256 || v.KEK != "k1" || len(v.WrappedKey) != crypt.WrappedSize {
		t.Fatalf("created %q under %q with %d wrapped bytes", v.Encryption, v.KEK, len(v.WrappedKey))
	}
	pub, err := json.Marshal(v.Public())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(pub, []byte("wrapped_key")) || !bytes.Contains(pub, []byte(`"encryption":"aes-xts-256"`)) {
		t.Fatalf("public view %s", pub)
	}
	dk, err := keys.Unwrap(v.WrappedKey, v.KEK, v.UUID)
	if err != nil || len(dk) != crypt.DataKeySize {
		t.Fatalf("the recorded key does not unwrap: %v", err)
	}

	rotated := testKeyring(t, "k2")
	w, id, err := rotated.Wrap(dk, v.UUID)
	if err != nil {
		t.Fatal(err)
	}
	applyOK(t, m, Command{Op: OpRewrapKeys, Rewrap: []Rewrap{{Volume: "sec", From: "k0", KEK: id, WrappedKey: w}}})
	if m.State().Volumes["sec"].KEK != "k1" {
		t.Fatal("a rewrap from a KEK the volume is not under applied")
	}
	applyOK(t, m, Command{Op: OpRewrapKeys, Rewrap: []Rewrap{{Volume: "sec", From: "k1", KEK: id, WrappedKey: w}}})
	v = m.State().Volumes["sec"]
	if got, err := rotated.Unwrap(v.WrappedKey, v.KEK, v.UUID); v.KEK != "k2" || err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("after the rewrap: under %q, %v", v.KEK, err)
	}

	bad := []*CreateVolume{
		{Encryption: "rot13"},
		{Encryption: EncryptionAESXTS256},
		{KEK: "k1", WrappedKey: w},
	}
	for _, cv := range bad {
		b := create("bad", 1)
		b.Create.Encryption, b.Create.KEK, b.Create.WrappedKey = cv.Encryption, cv.KEK, cv.WrappedKey
		if _, err := applyCmd(t, m, b); !errors.Is(err, ErrInvalid) {
			t.Errorf("create with encryption %q, kek %q: %v, want ErrInvalid", cv.Encryption, cv.KEK, err)
		}
	}
	if _, err := applyCmd(t, m, Command{Op: OpRewrapKeys}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty rewrap: %v, want ErrInvalid", err)
	}
	if err := (&Cluster{}).Encrypt(create("x", 1).Create, EncryptionAESXTS256); !errors.Is(err, crypt.ErrNoKEK) {
		t.Errorf("Encrypt without a keyring: %v, want crypt.ErrNoKEK", err)
	}
}

// TestEncryptedVolumeRefusesCompression: create_volume with both
// encryption and compression is refused before it is proposed, since the
// stores cannot do both (pkg/store volume_options.go).
func TestEncryptedVolumeRefusesCompression(t *testing.T) {
	c := create("both", 1)
	_, _ = rand.Read(c.Create.UUID[:])
	cl := &Cluster{}
	cl.SetKeys(testKeyring(t, "k1"))
	if err := cl.Encrypt(c.Create, EncryptionAESXTS256); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("encrypted alone: %v", err)
	}
	c.Create.Compression = "lz4"
	if err := c.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("encrypted and compressed: %v, want ErrInvalid", err)
	}
}
