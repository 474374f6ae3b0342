//go:build race

package store

// raceEnabled: the race detector makes memory copies (disk.MemDrive copies
// the whole drive image at every Sync) tens of times slower, so the crash
// tests run fewer seeds under it.
const raceEnabled = true
