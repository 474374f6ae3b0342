package store

import (
	"errors"
	"testing"

	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

// TestStampFormatsChecksAndAdopts: a store formatted with a stamp writes its
// node UUID into the node record and every superblock, and the cluster UUID
// into the node record; reopening with another stamp is refused; a record
// formatted without one (before stamps) adopts the stamp's cluster when
// the node UUID is its own.
func TestStampFormatsChecksAndAdopts(t *testing.T) {
	stamp := identity.Stamp{Cluster: identity.NewClusterUUID(), Node: identity.NewNodeUUID()}
	cfg := defaultRigConfig()
	cfg.opts.Stamp = stamp
	r := newRig(t, cfg)
	id, err := ReadIdentity(r.db, r.s.opts.Drives)
	if err != nil {
		t.Fatal(err)
	}
	if !id.Formatted || id.Stamp != stamp || len(id.Drives) != 4 {
		t.Fatalf("identity %+v, want %v on 4 drives", id, stamp)
	}
	for i, d := range id.Drives {
		if !d.Formatted || d.Node != stamp.Node || d.Err != nil {
			t.Errorf("drive %d: %+v", i, d)
		}
	}
	for _, other := range []identity.Stamp{{Cluster: identity.NewClusterUUID(), Node: stamp.Node},
		{Cluster: stamp.Cluster, Node: identity.NewNodeUUID()}} {
		r.opts.Stamp = other
		closeMedia(r)
		if err := r.tryOpen(); !errors.Is(err, ErrForeignStore) {
			t.Errorf("reopen as %v: %v, want ErrForeignStore", other, err)
		}
	}
	// Before stamps: a node record without a cluster UUID.
	node, _, err := r.db.Node()
	if err != nil {
		t.Fatal(err)
	}
	node.ClusterUUID = identity.ClusterUUID{}
	if err := r.db.Update(func(tx *meta.Tx) error { return tx.PutNode(node) }); err != nil {
		t.Fatal(err)
	}
	r.opts.Stamp = stamp
	closeMedia(r)
	r.open()
	if got, _, _ := r.db.Node(); got.ClusterUUID != stamp.Cluster {
		t.Errorf("the cluster UUID was not adopted: %+v", got)
	}
}

// closeMedia closes the rig's store, if open, and gives it its drives and
// region again as they were (Close and a failed Open close them).
func closeMedia(r *rig) {
	if r.s != nil {
		_ = r.s.Close()
		r.s = nil
	}
	r.region = pmem.NewFakeImage(r.region.Persisted(), 2)
	for i, p := range r.plain {
		r.plain[i] = p.reopen()
	}
}

// TestReadIdentityOfBlankAndUnreadableDrives: blank drives are not
// formatted and carry no error; a drive with a corrupt superblock reports
// why.
func TestReadIdentityOfBlankAndUnreadableDrives(t *testing.T) {
	db, err := meta.Open(meta.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	blank, bad := disk.NewMem(4<<20), disk.NewMem(4<<20)
	if err := disk.WriteSuperblock(bad, disk.Superblock{DriveUUID: disk.NewUUID()}); err != nil {
		t.Fatal(err)
	}
	garbage := disk.AlignedBuffer(2 * disk.SuperblockSize)
	if _, err := bad.ReadAt(garbage, 0); err != nil {
		t.Fatal(err)
	}
	garbage[100], garbage[disk.SuperblockSize+100] = 1, 1 // reserved bytes: both copies fail their checksum
	if _, err := bad.WriteAt(garbage, 0); err != nil {
		t.Fatal(err)
	}
	id, err := ReadIdentity(db, []disk.Drive{blank, bad})
	if err != nil {
		t.Fatal(err)
	}
	if id.Formatted || !id.Stamp.IsZero() || id.Drives[0] != (DriveIdentity{}) || id.Drives[1].Formatted ||
		!errors.Is(id.Drives[1].Err, disk.ErrCorruptSuperblock) {
		t.Fatalf("identity %+v", id)
	}
}

// TestMountWithTheFirstDriveUnreadable: a drive whose superblock fails its
// check is opened failed whatever its slot. The check of drive 0 used to
// record its failure before the later slots existed, and refreshCapacity
// then dereferenced their nil slots (a panic at Open).
func TestMountWithTheFirstDriveUnreadable(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	closeMedia(r)
	zero := disk.AlignedBuffer(2 * disk.SuperblockSize)
	if _, err := r.plain[0].WriteAt(zero, 0); err != nil {
		t.Fatal(err)
	}
	r.open()
	if st := r.s.drives[0].getState(); st != meta.DriveFailed {
		t.Fatalf("drive 0 without a superblock is %v, want failed", st)
	}
	for i := 1; i < len(r.s.drives); i++ {
		if !r.s.drives[i].healthy() {
			t.Errorf("drive %d is %v", i, r.s.drives[i].getState())
		}
	}
}
