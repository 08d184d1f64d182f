package boltstore_test

import (
	"cmp"
	"path/filepath"
	"testing"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/storetest"
)

// TestBoltConformance runs the journal's conformance suite on bbolt
// files with the default options.
func TestBoltConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T, o storetest.Options) func() (store.Journal, error) {
			path, opts := filepath.Join(t.TempDir(), "journal.db"), boltstore.DefaultOptions()
			opts.MaxJobSize = cmp.Or(o.MaxJobSize, opts.MaxJobSize)
			return func() (store.Journal, error) { return boltstore.Open(path, opts) }
		},
	})
}

// TestBoltConformanceEncrypted runs the suite again with the journal
// encrypted at rest: every promise holds with the keys.
func TestBoltConformanceEncrypted(t *testing.T) {
	t.Parallel()
	keys := storetest.Keys(t, "k1")
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T, o storetest.Options) func() (store.Journal, error) {
			path, opts := filepath.Join(t.TempDir(), "journal.db"), boltstore.DefaultOptions()
			opts.MaxJobSize = cmp.Or(o.MaxJobSize, opts.MaxJobSize)
			opts.Keys = keys
			return func() (store.Journal, error) { return boltstore.Open(path, opts) }
		},
	})
}
