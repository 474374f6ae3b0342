package store

import (
	"basalt/pkg/compress"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
)

// fileRig is a store on real drive files (O_DIRECT where the filesystem
// allows), a write-buffer file and a metadata directory, all in one
// temporary directory, which can be closed and opened again.
type fileRig struct {
	t     *testing.T
	paths Paths
	s     *Store
}

const fileRigDriveSize = 8 << 20

func newFileRig(t *testing.T) *fileRig {
	dir := t.TempDir()
	r := &fileRig{t: t, paths: Paths{Buffer: filepath.Join(dir, "buffer"), BufferSize: 1 << 20,
		MetaDir: filepath.Join(dir, "meta"), DriveSize: fileRigDriveSize}}
	for i := range 4 {
		r.paths.Drives = append(r.paths.Drives, filepath.Join(dir, fmt.Sprintf("drive%d", i)))
	}
	r.open()
	t.Cleanup(func() {
		if r.s != nil {
			_ = r.s.Close()
		}
	})
	return r
}

func (r *fileRig) open() {
	r.t.Helper()
	s, err := OpenPaths(r.paths, Options{ChunkSize: 16 << 10, SegmentStripes: 4, BatchStripes: 4})
	if err != nil {
		r.t.Fatalf("OpenPaths: %v", err)
	}
	r.s = s
}

func (r *fileRig) close() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatalf("Close: %v", err)
	}
	r.s = nil
}

// driveHolds reports whether any drive file holds marker.
func (r *fileRig) driveHolds(marker []byte) bool {
	r.t.Helper()
	for _, path := range r.paths.Drives {
		b, err := os.ReadFile(path)
		if err != nil {
			r.t.Fatal(err)
		}
		if bytes.Contains(b, marker) {
			return true
		}
	}
	return false
}

// patterned returns n blocks, each the marker repeated, then the block's
// number: recognizable on a drive in clear, and each block distinct.
func patterned(marker string, n int) []byte {
	buf := bytes.Repeat([]byte(marker), n*BlockSize/len(marker)+1)[:n*BlockSize]
	for i := range n {
		copy(buf[i*BlockSize:], fmt.Sprintf("block %06d ", i))
	}
	return buf
}

func randomKey(rng *rand.Rand) []byte {
	key := make([]byte, XTSKeySize)
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	return key
}

func mustRead(t *testing.T, v *Volume, n int) []byte {
	t.Helper()
	got := make([]byte, n*BlockSize)
	if err := v.ReadAt(context.Background(), got, 0); err != nil {
		t.Fatalf("ReadAt %s: %v", v.Name(), err)
	}
	return got
}

// TestEncryptedVolumeOnDrives writes a recognizable pattern to a volume in
// clear and another to an encrypted one: on the drive files the first is
// found and the second is not, before and after a drive's rebuild; the
// encrypted volume reads back after a restart once its key is set, refuses
// I/O before, and refuses a wrong key.
func TestEncryptedVolumeOnDrives(t *testing.T) {
	seed := testSeeds(t, 1)[0]
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	key := randomKey(rng)
	const blocks, clearMark, secretMark = 96, "BASALT-CLEAR-PATTERN-", "BASALT-SECRET-PATTERN-"
	r := newFileRig(t)
	plain, err := r.s.CreateVolume("clear", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := r.s.CreateVolumeWith("secret", 1<<20, VolumeOptions{Encryption: EncryptionAESXTS256, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := map[string][]byte{"clear": patterned(clearMark, blocks), "secret": patterned(secretMark, blocks)}
	for _, v := range []*Volume{plain, enc} {
		if err := v.WriteAt(ctx, want[v.Name()], 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, enc, blocks); !bytes.Equal(got, want["secret"]) {
		t.Fatal("the encrypted volume reads back other data than was written")
	}
	r.close()
	mark := func(m string) []byte { return bytes.Repeat([]byte(m), 3) }
	if !r.driveHolds(mark(clearMark)) {
		t.Fatal("the volume in clear's pattern is not on the drives: the scan finds nothing")
	}
	if r.driveHolds(mark(secretMark)) {
		t.Fatal("the encrypted volume's plaintext is on the drives")
	}

	r.open()
	enc, err = r.s.Volume("secret")
	if err != nil {
		t.Fatal(err)
	}
	if enc.Encryption() != EncryptionAESXTS256 {
		t.Fatalf("encryption after restart %q", enc.Encryption())
	}
	if err := enc.ReadAt(ctx, make([]byte, BlockSize), 0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("read without the key: %v, want ErrNoKey", err)
	}
	if err := enc.WriteAt(ctx, make([]byte, BlockSize), 0, 0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("write without the key: %v, want ErrNoKey", err)
	}
	if err := enc.SetKey(randomKey(rng)); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("SetKey with a wrong key: %v, want ErrWrongKey", err)
	}
	for range 2 { // the same key twice is fine
		if err := enc.SetKey(key); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustRead(t, enc, blocks); !bytes.Equal(got, want["secret"]) {
		t.Fatal("the encrypted volume reads other data after a restart")
	}

	// Rebuild drive 1 onto a new file: reconstruction works on ciphertext.
	if err := r.s.FailDrive(1); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, enc, blocks); !bytes.Equal(got, want["secret"]) {
		t.Fatal("the encrypted volume reads other data degraded")
	}
	r.paths.Drives[1] += "-replacement"
	d, err := disk.OpenFile(r.paths.Drives[1], fileRigDriveSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.s.ReplaceDrive(1, d); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Rebuild(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r.close()
	if r.driveHolds(mark(secretMark)) {
		t.Fatal("the rebuilt drive holds the encrypted volume's plaintext")
	}
	r.open()
	enc, err = r.s.Volume("secret")
	if err != nil {
		t.Fatal(err)
	}
	if err := enc.SetKey(key); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, enc, blocks); !bytes.Equal(got, want["secret"]) {
		t.Fatal("the encrypted volume reads other data after the rebuild")
	}
}

// TestEncryptedVolumeUnderGC overwrites an encrypted volume until the
// cleaner relocates its blocks (without the key: the ciphertext moves as
// it is, its sector number being the LBA), then reads every block back,
// before and after a reopen.
func TestEncryptedVolumeUnderGC(t *testing.T) {
	seed := testSeeds(t, 1)[0]
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	key := randomKey(rng)
	cfg := defaultRigConfig()
	cfg.opts.synchronous = true
	r := newRig(t, cfg)
	n := int(r.s.Stats().CapacityBytes/BlockSize) * 7 / 10
	v, err := r.s.CreateVolumeWith("a", int64(n)*BlockSize, VolumeOptions{Encryption: EncryptionAESXTS256, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	want := overwriteTags(t, v, n, uint64(seed), r.s.w.work)
	if r.s.Stats().RelocatedBlocks == 0 {
		t.Fatal("the cleaner relocated nothing: the test does not exercise it")
	}
	check := func(when string) {
		for lba, tag := range readTags(t, v, 0, n) {
			if tag != want[lba] {
				t.Fatalf("%s: block %d holds write %d, want %d", when, lba, tag, want[lba])
			}
		}
	}
	check("after the churn")
	r.reopen()
	if v, err = r.s.Volume("a"); err != nil {
		t.Fatal(err)
	}
	if err := v.SetKey(key); err != nil {
		t.Fatal(err)
	}
	check("after a reopen")
}

// TestVolumeOptionsChecked: an unknown encryption, a key of the wrong
// length or missing, a key without encryption, and SetKey on a volume in
// clear are refused.
func TestVolumeOptionsChecked(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	key := make([]byte, XTSKeySize)
	for _, o := range []VolumeOptions{
		{Encryption: "rot13"},
		{Encryption: EncryptionAESXTS256},
		{Encryption: EncryptionAESXTS256, Key: key[:32]},
		{Key: key},
		{Encryption: EncryptionAESXTS256, Key: key, Compression: compress.LZ4}, // not both (volume_options.go)
	} {
		if _, err := r.s.CreateVolumeWith("x", 1<<20, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("options %q with a %d-byte key: %v, want ErrInvalidOptions", o.Encryption, len(o.Key), err)
		}
	}
	v, err := r.s.CreateVolume("plain", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.SetKey(key); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("SetKey on a volume in clear: %v, want ErrInvalidOptions", err)
	}
}

// TestEncryptedStagedBytesChanged: a staged block whose caller changed it
// before destaging (breaking the contract, as
// TestStagedReadChecksTheCallersBytes does) is stored with a checksum its
// ciphertext fails, so once destaged it reads as ErrMedia, as it would in
// clear; an unchanged neighbour reads back.
func TestEncryptedStagedBytesChanged(t *testing.T) {
	seed := testSeeds(t, 1)[0]
	r := newRig(t, stagedRigConfig(false))
	v, err := r.s.CreateVolumeWith("v", 4<<20, VolumeOptions{Encryption: EncryptionAESXTS256,
		Key: randomKey(rand.New(rand.NewPCG(uint64(seed), 3)))})
	if err != nil {
		t.Fatal(err)
	}
	p := taggedBlocks(7, 8)
	if err := v.WriteStaged(p, 0, 1); err != nil {
		t.Fatal(err)
	}
	p[100] ^= 1
	if err := r.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := tryReadTags(v, 0, 1); !errors.Is(err, backend.ErrMedia) {
		t.Fatalf("read of a destaged block its caller changed: %v, want ErrMedia", err)
	}
	if got := readTags(t, v, 1, 1); got[0] != 8 {
		t.Fatalf("the unchanged block reads tag %d, want 8", got[0])
	}
}
