package brokertest

import (
	"fmt"
	"syscall"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/store"
)

// WrapJournal is an Options.OpenJournal that opens the bbolt journal in
// dir as the broker does (boltjournal.Open) and hands it to wrap.
func WrapJournal(dir string, wrap func(store.Journal) store.Journal) func(broker.JournalSetup) (store.Journal, error) {
	return func(s broker.JournalSetup) (store.Journal, error) {
		s.Options.DataDir = dir
		j, err := boltjournal.Open(s)
		if err != nil {
			return nil, err
		}
		return wrap(j), nil
	}
}

// BrokenReads is a journal whose reads fail as a failing disk makes them
// fail (ErrDisk); it does not compact (no store.Compactor).
type BrokenReads struct{ store.Journal }

// ErrDisk is what BrokenReads' reads fail with.
var ErrDisk = fmt.Errorf("journal: read failed: %w", syscall.EIO)

func (BrokenReads) Get(string) (*store.Job, error)               { return nil, ErrDisk }
func (BrokenReads) List(store.ListOptions) (store.Page, error)   { return store.Page{}, ErrDisk }
func (BrokenReads) Counts(...store.State) ([]store.Count, error) { return nil, ErrDisk }
func (BrokenReads) Result(string) ([]byte, error)                { return nil, ErrDisk }
