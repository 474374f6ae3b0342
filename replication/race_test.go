//go:build race

package replication

// raceEnabled: the race detector makes sync.Pool drop objects at random
// (crypto/tls keeps its record buffers in one), so allocation counts do
// not hold under it.
const raceEnabled = true
