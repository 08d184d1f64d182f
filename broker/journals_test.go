package broker_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// Journals for the tests that need one to misbehave: each is the real
// bbolt journal the broker would open, with a fault or a delay around it.

// heldJournal's Append and PutSchedule outcomes wait until release is
// closed, so a test sees a write in progress for as long as it needs.
type heldJournal struct {
	store.Journal
	release chan struct{}
}

func (h heldJournal) Append(j *store.Job, done func(bool, error)) {
	h.Journal.Append(j, func(dup bool, err error) {
		go func() { <-h.release; done(dup, err) }()
	})
}

func (h heldJournal) PutSchedule(s *store.Schedule, done func(bool, error)) {
	h.Journal.PutSchedule(s, func(created bool, err error) {
		go func() { <-h.release; done(created, err) }()
	})
}

// journalWith makes the journal in dir, as a stopped broker leaves it,
// holding schedules.
func journalWith(t *testing.T, dir string, schedules ...*store.Schedule) {
	t.Helper()
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, s := range schedules {
		if _, err := store.Wait(func(done func(bool, error)) { j.PutSchedule(s, done) }); err != nil {
			t.Fatal(err)
		}
	}
}

// fencingJournal fails every Append and Complete with store.ErrFenced once
// fence is closed, as a replicated journal does when another broker has
// taken over.
type fencingJournal struct {
	store.Journal
	fence chan struct{}
}

func (f fencingJournal) fenced() error {
	select {
	case <-f.fence:
		return fmt.Errorf("%w: another broker holds the lease", store.ErrFenced)
	default:
		return nil
	}
}

func (f fencingJournal) Append(j *store.Job, done func(bool, error)) {
	if err := f.fenced(); err != nil {
		done(false, err)
		return
	}
	f.Journal.Append(j, done)
}

func (f fencingJournal) Complete(msgid string, result []byte, keepUntil time.Time, trail []store.TrailEvent, done func(bool, error)) {
	if err := f.fenced(); err != nil {
		done(false, err)
		return
	}
	f.Journal.Complete(msgid, result, keepUntil, trail, done)
}
