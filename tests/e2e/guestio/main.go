// Command guestio is the block I/O tool the e2e guest runs against an NVMe
// namespace (tests/e2e/guest/dax.sh): 4 KiB O_DIRECT writes at queue depth
// 1, each one either timed or flushed and recorded, and the read-back of
// what was recorded. It is built as a static binary by the e2e tests and
// carried into the guest's initramfs.
//
//	guestio lat    -dev D -lba L -n N [-warmup W] -label NAME
//	guestio write  -dev D -lba L -n N -gen G -ack FILE [-stop FILE]
//	guestio verify -dev D -ack FILE
//	guestio persist -file F -n N -label NAME [-msync]
//
// lat writes N blocks from L (after W untimed ones), one at a time, and
// prints their latency as BASALT-E2E-KV lines lat_NAME_{n,avg_us,p50_us,
// p99_us,min_us,max_us}. write writes blocks L, L+1, ... (at most N, until
// FILE -stop exists), each followed by fdatasync (an NVMe Flush), and after
// each appends "LBA GEN" to the ack file and syncs it: a line in the ack
// file is a write the device acknowledged as durable. verify reads every
// block named in the ack file and compares it with what write wrote there.
//
// persist times pkg/pmem alone, without basaltd: it maps F (16 MiB, made
// if missing) with pmem.OpenFile, or with FileOptions.Msync under -msync,
// and appends N log-like records of 4 KiB + 64 bytes, each stored and then
// Persist'ed, timing each Persist; it prints the region's mode as
// BASALT-E2E-KV persist_NAME_mode and the latencies as persist_NAME_*.
//
// A block's 4 KiB are a function of (LBA, GEN): a 16-byte header (LBA, GEN,
// little-endian) and then splitmix64 output seeded with both.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"basalt/pkg/pmem"
)

const blockSize = 4096

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guestio lat|write|verify|persist [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "lat":
		err = cmdLat(os.Args[2:])
	case "write":
		err = cmdWrite(os.Args[2:])
	case "verify":
		err = cmdVerify(os.Args[2:])
	case "persist":
		err = cmdPersist(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "guestio %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// fill writes block (lba, gen)'s contents into b (blockSize bytes).
func fill(b []byte, lba, gen uint64) {
	binary.LittleEndian.PutUint64(b[0:], lba)
	binary.LittleEndian.PutUint64(b[8:], gen)
	x := lba*0x9E3779B97F4A7C15 ^ gen<<32 ^ 0xB5A1
	for i := 16; i < len(b); i += 8 {
		x += 0x9E3779B97F4A7C15
		z := x
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		binary.LittleEndian.PutUint64(b[i:], z^z>>31)
	}
}

// alignedBlock returns a blockSize buffer aligned to blockSize, as O_DIRECT
// wants.
func alignedBlock() []byte {
	b, err := unix.Mmap(-1, 0, blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		panic(err)
	}
	return b
}

func openDev(path string, flags int) (int, error) {
	fd, err := unix.Open(path, flags|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

func pwriteBlock(fd int, b []byte, lba uint64) error {
	n, err := unix.Pwrite(fd, b, int64(lba)*blockSize)
	if err == nil && n != len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	if err != nil {
		return fmt.Errorf("write of LBA %d: %w", lba, err)
	}
	return nil
}

func cmdLat(args []string) error {
	fs := flag.NewFlagSet("lat", flag.ExitOnError)
	dev := fs.String("dev", "", "block device")
	lba := fs.Uint64("lba", 0, "first block (4 KiB units)")
	n := fs.Int("n", 1000, "timed writes")
	warmup := fs.Int("warmup", 50, "untimed writes before them")
	label := fs.String("label", "", "name in the KV lines")
	if err := fs.Parse(args); err != nil || *dev == "" || *label == "" || *n < 1 {
		return errors.New("want -dev, -label and -n >= 1")
	}
	fd, err := openDev(*dev, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	b := alignedBlock()
	lat := make([]time.Duration, 0, *n)
	for i := 0; i < *warmup+*n; i++ {
		at := *lba + uint64(i%*n)
		fill(b, at, uint64(i))
		start := time.Now()
		if err := pwriteBlock(fd, b, at); err != nil {
			return err
		}
		if i >= *warmup {
			lat = append(lat, time.Since(start))
		}
	}
	printLatency("lat_"+*label, lat)
	return nil
}

// printLatency prints BASALT-E2E-KV lines PREFIX_{n,avg_us,p50_us,p99_us,
// min_us,max_us}.
func printLatency(prefix string, lat []time.Duration) {
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
	pct := func(p int) time.Duration { return lat[min(len(lat)-1, len(lat)*p/100)] }
	kv := func(k, v string) { fmt.Printf("BASALT-E2E-KV %s_%s=%s\n", prefix, k, v) }
	kv("n", strconv.Itoa(len(lat)))
	kv("avg_us", us(sum/time.Duration(len(lat))))
	kv("p50_us", us(pct(50)))
	kv("p99_us", us(pct(99)))
	kv("min_us", us(lat[0]))
	kv("max_us", us(lat[len(lat)-1]))
}

func cmdWrite(args []string) error {
	fs := flag.NewFlagSet("write", flag.ExitOnError)
	dev := fs.String("dev", "", "block device")
	lba := fs.Uint64("lba", 0, "first block (4 KiB units)")
	n := fs.Int("n", 0, "at most this many writes")
	gen := fs.Uint64("gen", 1, "generation, part of the contents")
	ack := fs.String("ack", "", "file that lists the acknowledged writes")
	stop := fs.String("stop", "", "stop once this file exists")
	if err := fs.Parse(args); err != nil || *dev == "" || *ack == "" || *n < 1 {
		return errors.New("want -dev, -ack and -n >= 1")
	}
	fd, err := openDev(*dev, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	af, err := os.OpenFile(*ack, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer af.Close()
	b := alignedBlock()
	for i := 0; i < *n; i++ {
		if *stop != "" {
			if _, err := os.Stat(*stop); err == nil {
				break
			}
		}
		at := *lba + uint64(i)
		fill(b, at, *gen)
		if err := pwriteBlock(fd, b, at); err != nil {
			return err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("flush after LBA %d: %w", at, err)
		}
		if _, err := fmt.Fprintf(af, "%d %d\n", at, *gen); err != nil {
			return err
		}
		if err := af.Sync(); err != nil {
			return err
		}
	}
	return nil
}

func cmdVerify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	dev := fs.String("dev", "", "block device")
	ack := fs.String("ack", "", "file that lists the acknowledged writes")
	if err := fs.Parse(args); err != nil || *dev == "" || *ack == "" {
		return errors.New("want -dev and -ack")
	}
	writes, err := readAcks(*ack)
	if err != nil {
		return err
	}
	fd, err := openDev(*dev, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	got, want := alignedBlock(), make([]byte, blockSize)
	bad := 0
	for _, w := range writes {
		if _, err := unix.Pread(fd, got, int64(w[0])*blockSize); err != nil {
			return fmt.Errorf("read of LBA %d: %w", w[0], err)
		}
		fill(want, w[0], w[1])
		if string(got) != string(want) {
			bad++
			fmt.Printf("mismatch at LBA %d: want gen %d, read header LBA %d gen %d\n", w[0], w[1],
				binary.LittleEndian.Uint64(got[0:]), binary.LittleEndian.Uint64(got[8:]))
		}
	}
	fmt.Printf("verified %d acknowledged writes from %s, %d mismatched\n", len(writes), *ack, bad)
	if bad > 0 {
		return fmt.Errorf("%d of %d acknowledged writes did not read back", bad, len(writes))
	}
	return nil
}

// readAcks parses an ack file; the last write of an LBA wins.
func readAcks(path string) ([][2]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	last := map[uint64]int{}
	var writes [][2]uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		lba, err1 := strconv.ParseUint(fields[0], 10, 64)
		gen, err2 := strconv.ParseUint(fields[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if i, ok := last[lba]; ok {
			writes[i][1] = gen
			continue
		}
		last[lba] = len(writes)
		writes = append(writes, [2]uint64{lba, gen})
	}
	return writes, sc.Err()
}

func cmdPersist(args []string) error {
	fs := flag.NewFlagSet("persist", flag.ExitOnError)
	file := fs.String("file", "", "region file")
	n := fs.Int("n", 2000, "timed records")
	label := fs.String("label", "", "name in the KV lines")
	msync := fs.Bool("msync", false, "map without MAP_SYNC (pmem.FileOptions.Msync)")
	if err := fs.Parse(args); err != nil || *file == "" || *label == "" || *n < 1 {
		return errors.New("want -file, -label and -n >= 1")
	}
	const size, record = 16 << 20, blockSize + 64
	r, err := pmem.OpenFileWith(*file, size, pmem.FileOptions{Msync: *msync})
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Printf("BASALT-E2E-KV persist_%s_mode=%s\n", *label, r.Mode())
	mem, payload := r.Bytes(), make([]byte, blockSize)
	lat := make([]time.Duration, 0, *n)
	for i, off := 0, 0; i < *n; i, off = i+1, off+record {
		if off+record > size {
			off = 0
		}
		fill(payload, uint64(i), 3)
		binary.LittleEndian.PutUint64(mem[off:], uint64(i))
		copy(mem[off+64:], payload)
		start := time.Now()
		if err := r.Persist(off, record); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	printLatency("persist_"+*label, lat)
	return nil
}
