// Package e2e boots a real Linux NVMe/TCP host under qemu and drives it
// against a target: basaltd on the host, or the kernel's own nvmet inside the
// guest as a reference. Two guests: Debian 12 (kernel 6.1, nvme-cli 2.3, the
// default) and Debian 13 (kernel 6.12, nvme-cli 2.13, keyctl and tlshd: the
// host with DH-HMAC-CHAP and TLS), chosen by BootOptions.Guest.
//
// The guests are prepared by scripts/e2e/setup.sh (kernels, initramfs, cache).
// Every run boots the kernel with that initramfs plus a small cpio holding
// /test.sh; the guest's /init runs it, prints the kernel log and a sentinel,
// and powers off:
//
//	BASALT-E2E-BOOTED kernel=... uptime=...
//	... script output (BASALT-E2E-STEP/KV/MARK/FAIL/BEGIN/END lines) ...
//	BASALT-E2E-DMESG-BEGIN
//	... dmesg ...
//	BASALT-E2E-DMESG-END
//	BASALT-E2E-EXIT=<rc of /test.sh>
//
// The slirp network maps the guest's 10.0.2.2 to the host's 127.0.0.1, so a
// target listening on 127.0.0.1:P is reached from the guest at 10.0.2.2:P.
//
// Environment:
//
//	BASALT_E2E=0        skip these tests (any other value, or unset: run)
//	BASALT_E2E_CACHE    cache directory for setup.sh (default /var/cache/basalt-e2e)
//	BASALT_E2E_ACCEL    qemu accelerator (default tcg; "kvm" where it works)
//	BASALT_E2E_LOGDIR   if set, every guest console is also written there
//	BASALT_E2E_BASALTD  a prebuilt basaltd to test instead of building cmd/basaltd
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Guest console markers (see scripts/e2e/setup.sh and guest/lib.sh).
const (
	markBooted     = "BASALT-E2E-BOOTED"
	markDmesgBegin = "BASALT-E2E-DMESG-BEGIN"
	markDmesgEnd   = "BASALT-E2E-DMESG-END"
	markExit       = "BASALT-E2E-EXIT="
	markMark       = "BASALT-E2E-MARK "
	markKV         = "BASALT-E2E-KV "
	markFail       = "BASALT-E2E-FAIL "
	markBegin      = "BASALT-E2E-BEGIN "
	markEnd        = "BASALT-E2E-END "
)

// bootAllowance is the part of a run's timeout kept for booting, dumping the
// kernel log and powering off; the guest script gets the rest (its own
// in-guest timeout, so that a hung script still yields a kernel log). Boot
// takes ~9 s on a quiet machine and was seen at 85 s with the 2 cores
// shared with parallel fuzzing and race tests.
const bootAllowance = 90 * time.Second

//go:embed guest/*.sh
var guestFS embed.FS

// Env is the prepared guests: the kernel and base initramfs of each.
type Env struct {
	Kernel string // Debian 12's bzImage
	Initrd string // its gzip'd newc cpio built by setup.sh
	// Debian13Kernel and Debian13Initrd are the Debian 13 guest's (setup.sh
	// builds them in the cache's trixie/ directory).
	Debian13Kernel, Debian13Initrd string
}

// Guest names one of the guests setup.sh builds. Both have the same /init
// contract.
type Guest string

const (
	// Debian12 is Debian 12's kernel 6.1 with nvme-cli 2.3: no in-band
	// authentication, no TLS. The default.
	Debian12 Guest = "debian12"
	// Debian13 is Debian 13's kernel 6.12 with nvme-cli 2.13, keyctl and
	// tlshd: DH-HMAC-CHAP and NVMe/TCP TLS on the host and in nvmet.
	Debian13 Guest = "debian13"
)

// image returns guest g's kernel and base initramfs ("" is Debian12).
func (e *Env) image(g Guest) (kernel, initrd string, err error) {
	switch g {
	case "", Debian12:
		return e.Kernel, e.Initrd, nil
	case Debian13:
		return e.Debian13Kernel, e.Debian13Initrd, nil
	}
	return "", "", fmt.Errorf("unknown guest %q", g)
}

var (
	setupOnce sync.Once
	setupEnv  *Env
	setupErr  error
	setupLog  []byte
)

// Setup prepares the guest (runs scripts/e2e/setup.sh once per test binary)
// and returns it. It skips the test only when BASALT_E2E=0; any failure to
// prepare the guest fails the test.
func Setup(t testing.TB) *Env {
	t.Helper()
	if os.Getenv("BASALT_E2E") == "0" {
		t.Skip("BASALT_E2E=0: skipping the qemu NVMe/TCP host e2e tests")
	}
	setupOnce.Do(func() {
		start := time.Now()
		setupEnv, setupLog, setupErr = runSetup()
		setupLog = append(setupLog, fmt.Sprintf("\n(setup took %s)\n", time.Since(start).Round(time.Millisecond))...)
	})
	if setupErr != nil {
		t.Fatalf("e2e setup: %v\n%s", setupErr, setupLog)
	}
	return setupEnv
}

func runSetup() (*Env, []byte, error) {
	script := filepath.Join(repoRoot(), "scripts", "e2e", "setup.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, out, fmt.Errorf("%s: %w", script, err)
	}
	dir := cacheDir()
	env := &Env{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"),
		Debian13Kernel: filepath.Join(dir, "trixie", "vmlinuz"), Debian13Initrd: filepath.Join(dir, "trixie", "initrd.img")}
	for _, p := range []string{env.Kernel, env.Initrd, env.Debian13Kernel, env.Debian13Initrd} {
		if _, err := os.Stat(p); err != nil {
			return nil, out, fmt.Errorf("setup.sh succeeded but: %w", err)
		}
	}
	return env, out, nil
}

func cacheDir() string {
	if d := os.Getenv("BASALT_E2E_CACHE"); d != "" {
		return d
	}
	return "/var/cache/basalt-e2e"
}

// repoRoot is the module root, found from this file's location.
func repoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("e2e: runtime.Caller failed")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// GuestScript assembles a guest script: exported shell variables, then
// guest/lib.sh, then the named fragments from guest/, then body.
func GuestScript(vars map[string]string, fragments []string, body string) string {
	var b strings.Builder
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, shellQuote(vars[k]))
	}
	for _, f := range append([]string{"lib.sh"}, fragments...) {
		src, err := guestFS.ReadFile("guest/" + f)
		if err != nil {
			panic(fmt.Sprintf("e2e: missing guest fragment %s: %v", f, err))
		}
		b.Write(src)
		b.WriteString("\n")
	}
	b.WriteString(body)
	b.WriteString("\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// BootOptions describe one guest run.
type BootOptions struct {
	// Guest is the guest to boot; "" is Debian12.
	Guest Guest
	// Script is /test.sh; its exit status is the run's RC.
	Script string
	// Timeout bounds the whole run (boot to power-off); the guest script gets
	// Timeout-bootAllowance. Must exceed bootAllowance by at least 30 s.
	Timeout time.Duration
	// OnMark, if set, is called in console order, synchronously on the
	// goroutine that called Boot (so it may use t), for every
	// "BASALT-E2E-MARK <name>" line the guest prints. The guest waits for the
	// effect of a mark; while OnMark runs the console is not read.
	OnMark func(name string)
	// HostFwd are slirp hostfwd rules ("tcp:127.0.0.1:HPORT-:GPORT") that
	// make guest ports reachable from the host.
	HostFwd []string
	// NVDIMM, if set, gives the guest an emulated NVDIMM.
	NVDIMM *NVDIMM
	// Files are put in the per-run cpio beside /test.sh. Their names must
	// be in directories the base initramfs has (bin/, etc/, ...): the
	// kernel's unpacker makes no parent directories for a file.
	Files []GuestFile
}

// NVDIMM is an emulated NVDIMM (-machine nvdimm=on, -device nvdimm) backed
// by a host file mapped shared, so the guest's stores reach the file. It has
// no label space: the guest sees one label-less region (guest/dax.sh).
type NVDIMM struct {
	Path string // host file, created or extended (sparse) to Size
	Size int64  // bytes, a multiple of 2 MiB
}

// GuestFile is a regular file for the guest's initramfs.
type GuestFile struct {
	Name string // path in the guest without the leading slash, e.g. "bin/basaltd"
	Mode uint32 // permission bits, e.g. 0o755
	Data []byte
}

// Result is what a guest run produced.
type Result struct {
	Console string        // whole console, ANSI escapes and CRs removed
	RC      int           // exit status of /test.sh
	Elapsed time.Duration // qemu start to exit
}

// RunGuest boots the guest with script as /test.sh and returns the console
// and the script's exit status. It fails the test if the guest does not reach
// the sentinel within timeout.
func RunGuest(t testing.TB, script string, timeout time.Duration) (console string, rc int) {
	t.Helper()
	r := Boot(t, BootOptions{Script: script, Timeout: timeout})
	return r.Console, r.RC
}

// Boot runs one guest as described by opts. qemu never outlives the call.
func Boot(t testing.TB, opts BootOptions) *Result {
	t.Helper()
	kernel, baseInitrd, err := Setup(t).image(opts.Guest)
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	if opts.Timeout < bootAllowance+30*time.Second {
		t.Fatalf("Boot: timeout %s too short (min %s)", opts.Timeout, bootAllowance+30*time.Second)
	}
	initrd := filepath.Join(t.TempDir(), "initrd-with-test.img")
	if err := writeInitrd(initrd, baseInitrd, opts.Script, opts.Files); err != nil {
		t.Fatalf("Boot: %v", err)
	}
	budget := int((opts.Timeout - bootAllowance) / time.Second)
	args := qemuArgs(kernel, initrd, budget, opts.HostFwd)
	if opts.NVDIMM != nil {
		if args, err = withNVDIMM(args, *opts.NVDIMM); err != nil {
			t.Fatalf("Boot: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("Boot: starting qemu: %v", err)
	}
	waited := false
	defer func() { // OnMark may end the test goroutine (t.Fatal): reap qemu anyway
		if !waited {
			cancel()
			_ = cmd.Wait()
		}
	}()
	console := readConsole(stdout, opts.OnMark)
	waitErr := cmd.Wait()
	waited = true
	res := &Result{Console: console, RC: -1, Elapsed: time.Since(start)}
	saveConsole(t, res.Console)
	if ctx.Err() != nil {
		t.Fatalf("Boot: guest did not finish within %s; console:\n%s\nqemu stderr:\n%s",
			opts.Timeout, tail(res.Console, 200), stderr.String())
	}
	rc, ok := exitStatus(res.Console)
	if !ok {
		t.Fatalf("Boot: no %s sentinel (qemu: %v); console:\n%s\nqemu stderr:\n%s",
			markExit, waitErr, tail(res.Console, 200), stderr.String())
	}
	res.RC = rc
	t.Logf("guest ran in %s (boot %ss), rc=%d", res.Elapsed.Round(100*time.Millisecond), bootUptime(res.Console), rc)
	return res
}

func qemuArgs(kernel, initrd string, budgetSeconds int, hostFwd []string) []string {
	accel := os.Getenv("BASALT_E2E_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	return []string{
		"-accel", accel, "-cpu", "max", "-m", strconv.Itoa(guestMemoryMiB), "-smp", "2",
		"-nographic", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 quiet loglevel=1 panic=-1 basalt.timeout=%d", budgetSeconds),
		"-netdev", "user,id=n0" + hostFwdOpts(hostFwd),
		// romfile=: no iPXE option ROM; the guest boots from -kernel.
		"-device", "virtio-net-pci,netdev=n0,romfile=",
	}
}

// guestMemoryMiB is the guest's RAM (qemuArgs' -m).
const guestMemoryMiB = 1024

// withNVDIMM adds nv to qemuArgs' args: a machine with NVDIMM support,
// memory slots for it, its backing file (created or extended here) and the
// device.
func withNVDIMM(args []string, nv NVDIMM) ([]string, error) {
	if nv.Size <= 0 || nv.Size%(2<<20) != 0 {
		return nil, fmt.Errorf("NVDIMM size %d: want a positive multiple of 2 MiB", nv.Size)
	}
	f, err := os.OpenFile(nv.Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("NVDIMM backing file: %w", err)
	}
	info, err := f.Stat()
	if err == nil && info.Size() < nv.Size {
		err = f.Truncate(nv.Size)
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, fmt.Errorf("NVDIMM backing file %s: %w", nv.Path, err)
	}
	out := slices.Clone(args)
	i := slices.Index(out, "-m")
	if i < 0 || i+1 >= len(out) {
		return nil, errors.New("withNVDIMM: no -m in the qemu arguments")
	}
	out[i+1] = fmt.Sprintf("%d,slots=2,maxmem=%dM", guestMemoryMiB, guestMemoryMiB+nv.Size>>20+1024)
	return append(out,
		"-machine", "pc,nvdimm=on",
		"-object", fmt.Sprintf("memory-backend-file,id=nvmem0,share=on,mem-path=%s,size=%d", strings.ReplaceAll(nv.Path, ",", ",,"), nv.Size),
		"-device", "nvdimm,id=nvdimm0,memdev=nvmem0",
	), nil
}

func hostFwdOpts(rules []string) string {
	var b strings.Builder
	for _, r := range rules {
		b.WriteString(",hostfwd=")
		b.WriteString(r)
	}
	return b.String()
}

// writeInitrd writes base, zero padding to a 4-byte boundary (the kernel
// looks for a following cpio only at aligned offsets), and a cpio holding
// script as /test.sh and files.
func writeInitrd(path, base, script string, files []GuestFile) error {
	src, err := os.ReadFile(base)
	if err != nil {
		return fmt.Errorf("reading base initrd: %w", err)
	}
	var b bytes.Buffer
	b.Write(src)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	entries := []cpioFile{{Name: "test.sh", Mode: 0o100755, Data: []byte(script)}}
	for _, f := range files {
		entries = append(entries, cpioFile{Name: f.Name, Mode: 0o100000 | f.Mode&0o7777, Data: f.Data})
	}
	if err := writeCpio(&b, entries); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

var ansiRE = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|c)`)

// readConsole collects the console until EOF, calling onMark for marks.
func readConsole(r io.Reader, onMark func(string)) string {
	var b strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(ansiRE.ReplaceAllString(sc.Text(), ""), "\r")
		b.WriteString(line)
		b.WriteByte('\n')
		if onMark != nil {
			if i := strings.Index(line, markMark); i >= 0 {
				onMark(strings.TrimSpace(line[i+len(markMark):]))
			}
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return b.String()
}

var exitRE = regexp.MustCompile(`(?m)^` + markExit + `(\d+)$`)

func exitStatus(console string) (int, bool) {
	m := exitRE.FindAllStringSubmatch(console, -1)
	if len(m) == 0 {
		return 0, false
	}
	rc, err := strconv.Atoi(m[len(m)-1][1])
	return rc, err == nil
}

var bootedRE = regexp.MustCompile(markBooted + ` .*uptime=([0-9.]+)`)

func bootUptime(console string) string {
	if m := bootedRE.FindStringSubmatch(console); m != nil {
		return m[1]
	}
	return "?"
}

func saveConsole(t testing.TB, console string) {
	dir := os.Getenv("BASALT_E2E_LOGDIR")
	if dir == "" {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.console.log", name, time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(path, []byte(console), 0o644)
		if err == nil {
			t.Logf("console saved to %s", path)
		}
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) <= lines {
		return s
	}
	return fmt.Sprintf("[... %d lines cut ...]\n%s", len(parts)-lines, strings.Join(parts[len(parts)-lines:], "\n"))
}

// Section returns the output the guest printed between BASALT-E2E-BEGIN name
// and BASALT-E2E-END name (the last such section), and whether it was found.
func Section(console, name string) (string, bool) {
	begin := markBegin + name + "\n"
	end := "\n" + markEnd + name + "\n"
	i := strings.LastIndex(console, begin)
	if i < 0 {
		return "", false
	}
	rest := console[i+len(begin):]
	if strings.HasPrefix(rest, markEnd+name+"\n") {
		return "", true
	}
	j := strings.Index(rest, end)
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// KV returns the BASALT-E2E-KV values the guest printed (last one wins).
func KV(console string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(console, "\n") {
		if i := strings.Index(line, markKV); i >= 0 {
			k, v, _ := strings.Cut(line[i+len(markKV):], "=")
			kv[k] = v
		}
	}
	return kv
}

// GuestDmesg returns the kernel log the guest printed before powering off.
func GuestDmesg(console string) (string, error) {
	i := strings.LastIndex(console, markDmesgBegin+"\n")
	if i < 0 {
		return "", errors.New("e2e: no dmesg section in the console")
	}
	rest := console[i+len(markDmesgBegin)+1:]
	j := strings.Index(rest, markDmesgEnd)
	if j < 0 {
		return "", errors.New("e2e: dmesg section not terminated")
	}
	return rest[:j], nil
}

// RequireOK fails the test unless the guest script exited 0; it logs the
// console (and the failing step) first.
func RequireOK(t testing.TB, r *Result) {
	t.Helper()
	if r.RC == 0 {
		return
	}
	var fails []string
	for _, line := range strings.Split(r.Console, "\n") {
		if strings.Contains(line, markFail) {
			fails = append(fails, line)
		}
	}
	t.Fatalf("guest script exited %d: %s\nconsole:\n%s", r.RC, strings.Join(fails, "; "), tail(r.Console, 400))
}
