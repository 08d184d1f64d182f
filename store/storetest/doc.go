// Package storetest is the conformance suite of store.Journal: the
// journal's behaviour written once, as tests every backend runs. It is an
// ordinary (non-test) package so that each backend's own tests can import
// it, as river's riverdrivertest is for its drivers.
//
// A backend gives the suite a Harness: a way to make fresh, empty storage
// for one test and to open it (again and again, to check what survives a
// Close). Run runs every check as a parallel subtest with storage of its
// own:
//
//	func TestBoltConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Fresh: func(t *testing.T, o storetest.Options) func() (store.Journal, error) {
//			path, opts := filepath.Join(t.TempDir(), "journal.db"), boltstore.DefaultOptions()
//			opts.MaxJobSize = cmp.Or(o.MaxJobSize, opts.MaxJobSize)
//			return func() (store.Journal, error) { return boltstore.Open(path, opts) }
//		}})
//	}
//
// The suite sees only the store.Journal interface, store.Wait and the
// error sentinels of package store, matched with errors.Is. A new backend
// must pass it unchanged: a check that does not fit a backend is a
// question about the Journal contract, to be settled in store/journal.go
// and here for every backend at once, never by skipping it for one.
//
// What a backend needs beyond the suite (its own open errors, crash
// tests, compaction, benchmarks) stays in that backend's tests.
package storetest
