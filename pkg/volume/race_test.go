//go:build race

package volume

// raceEnabled: the race detector makes sync.Pool drop objects at random,
// so allocation counts do not hold under it.
const raceEnabled = true
