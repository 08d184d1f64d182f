//go:build race

package broker_test

// raceEnabled: the race detector multiplies memory and time, so the
// memory tests do not run under it (make test runs them without it).
const raceEnabled = true
