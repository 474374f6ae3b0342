// Package lint holds the project's lint checks, written as tests (after
// pebble's internal/lint): the package boundaries (dependencies point from
// the NVMe side down to the media; docs/ARCHITECTURE.md, "Dependencies"),
// the rule that each third-party dependency lives behind one package, the
// injectable clock, and typed atomics. Run with `go test ./pkg/lint` (part
// of `make lint`).
package lint
