package worker

import "time"

// SetRoutesEvery makes workers read the placement again every d, until
// the returned func restores the default.
func SetRoutesEvery(d time.Duration) (restore func()) {
	old := routesEvery
	routesEvery = d
	return func() { routesEvery = old }
}
