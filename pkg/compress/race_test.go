//go:build race

package compress

// raceEnabled: under the race detector sync.Pool drops what it is given,
// so the zstd library allocates its decoder state again; the allocation
// checks hold only without it.
const raceEnabled = true
