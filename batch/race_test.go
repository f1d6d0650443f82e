//go:build race

package batch_test

// raceEnabled: the race detector slows the pure-Go SQLite several times over.
const raceEnabled = true
