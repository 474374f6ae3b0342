package store

import (
	"math/rand/v2"
	"slices"
	"testing"

	"basalt/pkg/compress"
)

// TestSnapshotOfTransformedVolumes: a snapshot and a clone of a compressed
// volume find the packed fragments they share with it (written under the
// volume's ID), and those of an encrypted volume read its ciphertext with
// its key, set on the volume alone after a restart; the clone keeps its own
// writes apart.
func TestSnapshotOfTransformedVolumes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		o    VolumeOptions
	}{
		{"lz4", VolumeOptions{Compression: compress.LZ4}},
		{"zstd", VolumeOptions{Compression: compress.Zstd}},
		{"aes-xts-256", VolumeOptions{Encryption: EncryptionAESXTS256, Key: randomKey(rng)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, defaultRigConfig())
			v, err := r.s.CreateVolumeWith("db", 64*BlockSize, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			before := []uint64{3, 6, 9, 12, 15, 18, 21, 24} // multiples of 3 compress (makeBlock)
			writeTags(t, v, 0, before...)
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.o.Compression != compress.None && r.s.counters.storedBytes.Load() >= r.s.counters.logicalBytes.Load() {
				t.Fatalf("nothing was packed: stored %d of %d bytes", r.s.counters.storedBytes.Load(),
					r.s.counters.logicalBytes.Load())
			}
			if _, err := r.s.CreateSnapshot(ctx, "db", "s1"); err != nil {
				t.Fatal(err)
			}
			writeTags(t, v, 0, 30, 33, 36)
			c, err := r.s.CloneVolume(ctx, "db", "s1", "db2")
			if err != nil {
				t.Fatal(err)
			}
			writeTags(t, c, 7, 39)
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				t.Helper()
				want := map[string][]uint64{
					"db":    {30, 33, 36, 12, 15, 18, 21, 24},
					"db@s1": before,
					"db2":   {3, 6, 9, 12, 15, 18, 21, 39},
				}
				for name, w := range want {
					if got := readTags(t, mustVolume(r.s, name), 0, 8); !slices.Equal(got, w) {
						t.Fatalf("%s: %s reads %v, want %v", when, name, got, w)
					}
				}
			}
			check("before a restart")
			r.reopen()
			if tc.o.Key != nil {
				if err := mustVolume(r.s, "db").SetKey(tc.o.Key); err != nil {
					t.Fatal(err)
				}
			}
			check("after a restart")
			if err := checkFamilyCounts(r.s); err != nil {
				t.Fatal(err)
			}
		})
	}
}
