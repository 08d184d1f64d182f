package broker

import (
	"path/filepath"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// openBolt is the bbolt journal in DataDir, for the tests inside this
// package (package boltjournal, which imports this one, is out of their
// reach).
func openBolt(s JournalSetup) (store.Journal, error) {
	o := boltstore.DefaultOptions()
	o.OnCommit, o.OnDamage, o.Logger = s.OnCommit, s.OnDamage, s.Options.Logger
	return boltstore.Open(filepath.Join(s.Options.DataDir, JournalFile), o)
}
