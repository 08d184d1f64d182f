// Package boltjournal opens a broker's default journal: the bbolt file
// broker.JournalFile in the broker's DataDir, behind its checksummed
// write-ahead log (package boltstore). It lives apart from package broker
// so that the broker knows only the store.Journal interface, not a
// backend:
//
//	opts := broker.DefaultOptions()
//	opts.DataDir = "/var/lib/emq"
//	opts.OpenJournal = boltjournal.Open
//	b, err := broker.New(opts)
package boltjournal

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// Open opens (or creates) the bbolt journal in s.Options.DataDir, with
// the broker's size limits and write-ahead log settings (MaxJobSize,
// JournalSegmentSize, JournalMaxLog, JournalRecover, JournalKeys). It is an
// Options.OpenJournal.
func Open(s broker.JournalSetup) (store.Journal, error) {
	o := s.Options
	if o.DataDir == "" {
		return nil, fmt.Errorf("data-dir: must not be empty")
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	bo := boltstore.DefaultOptions()
	bo.OnCommit, bo.OnDamage, bo.Logger = s.OnCommit, s.OnDamage, o.Logger
	bo.MaxJobSize = o.MaxJobSize
	bo.SegmentSize, bo.MaxLogBytes, bo.Recover = o.JournalSegmentSize, o.JournalMaxLog, o.JournalRecover
	bo.Keys = o.JournalKeys
	bo.CheckpointBytes = min(bo.CheckpointBytes, o.JournalMaxLog/2)
	bo.DirectBytes = min(bo.DirectBytes, o.JournalSegmentSize/2)
	return boltstore.Open(filepath.Join(o.DataDir, broker.JournalFile), bo)
}
