package lint

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "basalt"

type pkgInfo struct {
	ImportPath   string
	Dir          string
	Imports      []string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkgInfo
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// rel returns the package path relative to the module ("target/tcp").
func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

func under(path string, roots ...string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// TestThirdPartyDependenciesStayBehindOnePackage: each third-party module is
// imported by exactly one package (tree), so that replacing it touches one
// place (docs/ARCHITECTURE.md, "Dependencies").
func TestThirdPartyDependenciesStayBehindOnePackage(t *testing.T) {
	owners := map[string][]string{
		"github.com/klauspost/reedsolomon":  {"ec"},
		"go.etcd.io/raft/v3":                {"replication"},
		"github.com/dgraph-io/badger/v4":    {"pkg/meta"},
		"github.com/BurntSushi/toml":        {"pkg/config"},
		"github.com/prometheus":             {"pkg/metrics"},
		"gonum.org/v1/plot":                 {"bench/report"},
		"github.com/anishathalye/porcupine": {"tests/cluster"},
		"github.com/schollz/progressbar":    {"pkg/bench"},
		// The two command-line front ends share the CLI framework.
		"github.com/spf13/cobra": {"cmd/basaltctl", "pkg/bench/cli"},
	}
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			for dep, allowed := range owners {
				if (imp == dep || strings.HasPrefix(imp, dep+"/")) && !under(rel(p.ImportPath), allowed...) {
					t.Errorf("%s imports %s; only %v may", p.ImportPath, imp, allowed)
				}
			}
		}
	}
}

// TestDependenciesPointDownward (docs/ARCHITECTURE.md, "Dependencies"):
// target knows nothing of Raft, drives or parity; the storage packages know
// nothing of NVMe or Raft; replication knows bytes and indexes, not blocks
// (pkg/volume joins it to the backends); nothing imports cmd/ or tests/.
func TestDependenciesPointDownward(t *testing.T) {
	forbidden := []struct {
		from []string
		to   []string
	}{
		{[]string{"target"}, []string{"replication", "pkg/volume", "cache", "ec", "pkg/store", "pkg/disk", "pkg/meta", "pkg/pmem", "pkg/node", "pkg/nvme/host"}},
		{[]string{"pkg/nvme"}, []string{"target", "replication", "pkg/volume", "cache", "ec", "pkg/store", "pkg/backend"}},
		{[]string{"cache", "ec", "pkg/store", "pkg/disk", "pkg/meta", "pkg/pmem", "pkg/clock", "pkg/backend", "pkg/qos"}, []string{"target", "replication", "pkg/volume", "pkg/nvme", "pkg/node"}},
		{[]string{"replication"}, []string{"target", "pkg/nvme", "pkg/backend", "pkg/store", "pkg/volume"}},
		{[]string{"pkg/volume"}, []string{"target", "pkg/nvme", "pkg/node", "pkg/cluster", "pkg/metrics"}},
		{[]string{"ec"}, []string{"cache", "pkg/store", "pkg/meta"}},
		{[]string{"cache"}, []string{"ec", "pkg/store", "pkg/meta", "pkg/disk"}},
	}
	for _, p := range listPackages(t) {
		from := rel(p.ImportPath)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := rel(imp)
			if under(to, "cmd", "tests") {
				t.Errorf("%s imports %s: nothing imports binaries or black-box tests", from, to)
			}
			for _, rule := range forbidden {
				if under(from, rule.from...) && under(to, rule.to...) && !(from == "pkg/nvme/host" && to == "pkg/nvme") {
					t.Errorf("%s imports %s: dependencies must point downward (docs/ARCHITECTURE.md)", from, to)
				}
			}
		}
	}
}

// joiners may import both replication and a block package (pkg/backend,
// pkg/store): pkg/volume, whose Volume is the state machine that turns a
// Raft group into a block device, and the node wiring that builds it;
// binaries and black-box tests too.
var joiners = []string{"pkg/volume", "pkg/node", "cmd", "tests"}

// TestOnlyVolumeJoinsReplicationAndBlocks (docs/ARCHITECTURE.md,
// "Dependencies"): no other package's non-test files import both
// replication and pkg/backend or pkg/store, so that block semantics live
// in one package above the Raft layer.
func TestOnlyVolumeJoinsReplicationAndBlocks(t *testing.T) {
	for _, p := range listPackages(t) {
		from := rel(p.ImportPath)
		var raft, blocks bool
		for _, imp := range p.Imports {
			raft = raft || under(rel(imp), "replication") && strings.HasPrefix(imp, module+"/")
			blocks = blocks || under(rel(imp), "pkg/backend", "pkg/store") && strings.HasPrefix(imp, module+"/")
		}
		if raft && blocks && !under(from, joiners...) {
			t.Errorf("%s imports replication and a block package: only %v may (pkg/volume joins them)", from, joiners)
		}
	}
}

// clockExempt may read the wall clock directly: the clock itself, binaries,
// black-box tests, the host library (an initiator tool) and the node wiring.
var clockExempt = []string{"pkg/clock", "cmd", "tests", "pkg/nvme/host", "pkg/lint"}

// TestNoDirectTimeOrRawAtomics: the engine reads time only through pkg/clock
// so it can be simulated from a seed, and uses typed atomics (atomic.Uint64),
// never the raw functions.
func TestNoDirectTimeOrRawAtomics(t *testing.T) {
	banned := map[string]bool{"Now": true, "Sleep": true, "After": true, "AfterFunc": true,
		"NewTicker": true, "NewTimer": true, "Since": true, "Tick": true, "Until": true}
	fset := token.NewFileSet()
	for _, p := range listPackages(t) {
		r := rel(p.ImportPath)
		for _, name := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			timeName, atomicName := importName(file, "time"), importName(file, "sync/atomic")
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				pos := fset.Position(sel.Pos())
				if id.Name == timeName && banned[sel.Sel.Name] && !under(r, clockExempt...) {
					t.Errorf("%s: time.%s: use pkg/clock so the engine can be simulated", pos, sel.Sel.Name)
				}
				if id.Name == atomicName && isRawAtomic(sel.Sel.Name) {
					t.Errorf("%s: atomic.%s: use the typed atomics (atomic.Uint64 …)", pos, sel.Sel.Name)
				}
				return true
			})
		}
	}
}

func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return "\x00" // matches no identifier
}

func isRawAtomic(name string) bool {
	for _, prefix := range []string{"Add", "Load", "Store", "Swap", "CompareAndSwap", "And", "Or"} {
		if strings.HasPrefix(name, prefix) && name != prefix {
			return true
		}
	}
	return false
}

// TestRequiredTopLevel: the repository's required top level exists.
func TestRequiredTopLevel(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(string(root))
	for _, name := range []string{"cmd", "pkg", "target", "replication", "ec", "cache", "tests", "go.mod", "Makefile"} {
		if _, err := filepath.Glob(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, name)); len(m) == 0 {
			t.Errorf("required top-level %q is missing", name)
		}
	}
}
