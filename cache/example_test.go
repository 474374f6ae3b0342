package cache_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

func ExampleOpen() {
	region := pmem.NewFake(1<<20, 1) // in production: pmem.OpenFile(path, size)
	buffer, err := cache.Open(region, cache.Options{})
	if err != nil {
		panic(err)
	}
	const blockWrite cache.Kind = 1
	header, data := []byte("lba=42;"), []byte("hello")
	seq, err := buffer.Append(context.Background(), blockWrite, header, data)
	if err != nil {
		panic(err)
	}
	kind, payload, _ := buffer.Read(seq, nil)
	fmt.Printf("record %v, kind %v: %s\n", seq, kind, payload)
	_ = buffer.Release(seq) // destaged: the space may be reused
	fmt.Println("live records:", buffer.Stats().Live)
	// Output:
	// record 1, kind 1: lba=42;hello
	// live records: 0
}

// TestFileRegionRoundTrip runs the Buffer on a mapped file (msync or, on a DAX
// filesystem, MAP_SYNC) and finds its records after the file is reopened.
func TestFileRegionRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer")
	region, err := pmem.OpenFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.Open(region, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var live []record
	for i := range 100 {
		p := payloadFor(cache.Seq(i), 4096)
		live = append(live, record{appendMakingRoom(t, b, 3, p), 3, p})
	}
	if err := b.Release(50); err != nil {
		t.Fatal(err)
	}
	live = live[50:]
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := region.Close(); err != nil {
		t.Fatal(err)
	}
	region, err = pmem.OpenFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	b, err = cache.Open(region, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, live)
	if mode := b.Stats().Mode; mode != region.Mode().String() {
		t.Errorf("Stats().Mode = %q, region says %q", mode, region.Mode())
	}
}
