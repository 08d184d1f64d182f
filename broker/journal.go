package broker

import (
	"time"

	"github.com/eventmq/emq/store"
)

// loopJournal is the journal as the broker writes to it. A store.Journal
// calls each write's done on its own goroutine; every write here takes
// a done that runs on the loop instead (the journal's goroutine only
// posts it: one post a write), so it may touch loop state. The writes
// whose outcome only matters when they fail (Complete, RecordAttempt,
// Bury) take no callback: a failure is logged where it is reported
// (writeFailed), and nothing is posted. A write store.Journal gains is not here until it is
// written the same way: calling it does not compile.
//
// Reads (journalReads) run on the caller's goroutine and return their
// outcome, as they are.
type loopJournal struct {
	journalReads
	j store.Journal // its writes are called by the methods below only
	b *Broker
}

// journalReads are the journal's calls that report nothing later.
type journalReads interface {
	Load(fn func(*store.Job) error) error
	Payloads(msgids []string, fn func(i int, payload []byte, err error)) error
	Get(msgid string) (*store.Job, error)
	List(opts store.ListOptions) (store.Page, error)
	Counts(only ...store.State) ([]store.Count, error)
	LoadSchedules(fn func(*store.Schedule) error) error
	ListSchedules(after string, limit int) ([]*store.Schedule, string, error)
	GetSchedule(id string) (*store.Schedule, error)
	Result(msgid string) ([]byte, error)
	QueueSettings() (map[string]store.QueueSettings, error)
	TenantSettings() (map[string]map[string]store.TenantSettings, error)
	Limiters() (map[string]store.LimiterSettings, error)
	GetBatch(name string) (*store.Batch, error)
	ListBatches(after string, limit int) ([]*store.Batch, string, error)
	Children(msgid string, limit int) ([]string, error)
	SetKeys(k *store.Keyring) error
	Rekey(rate int) (store.RekeyStatus, error)
	RekeyStatus() store.RekeyStatus
	Close() error
}

func newLoopJournal(j store.Journal, b *Broker) loopJournal {
	return loopJournal{journalReads: j, j: j, b: b}
}

// onLoop is done run on b's loop.
func onLoop[T any](b *Broker, done func(T, error)) func(T, error) {
	if done == nil {
		return nil
	}
	return func(v T, err error) { b.post(func() { done(v, err) }) }
}

// onLoopErr is onLoop for a write that reports only an error.
func onLoopErr(b *Broker, done func(error)) func(error) {
	if done == nil {
		return nil
	}
	return func(err error) { b.post(func() { done(err) }) }
}

// Follow has fn run on the loop for each change the journal makes to
// the workflows on its own (store.Journal.Follow).
func (l loopJournal) Follow(fn func(store.WorkflowChange), keep time.Duration) {
	l.j.Follow(func(c store.WorkflowChange) { l.b.post(func() { fn(c) }) }, keep)
}

func (l loopJournal) Append(j *store.Job, done func(dup bool, err error)) {
	l.j.Append(j, onLoop(l.b, done))
}

func (l loopJournal) AppendBulk(jobs []*store.Job, done func(dups []bool, err error)) {
	l.j.AppendBulk(jobs, onLoop(l.b, done))
}

func (l loopJournal) Import(j *store.Job, done func(dup bool, err error)) {
	l.j.Import(j, onLoop(l.b, done))
}

func (l loopJournal) Remove(msgid string, done func(found bool, err error)) {
	l.j.Remove(msgid, onLoop(l.b, done))
}

func (l loopJournal) Revive(msgid string, trail []store.TrailEvent, done func(*store.Job, error)) {
	l.j.Revive(msgid, trail, onLoop(l.b, done))
}

func (l loopJournal) Cancel(msgid string, keepUntil time.Time, trail []store.TrailEvent, done func(*store.Job, error)) {
	l.j.Cancel(msgid, keepUntil, trail, onLoop(l.b, done))
}

func (l loopJournal) PurgeQueue(queue string, done func(removed int, err error)) {
	l.j.PurgeQueue(queue, onLoop(l.b, done))
}

func (l loopJournal) ExpireResults(now time.Time, done func(removed int, err error)) {
	l.j.ExpireResults(now, onLoop(l.b, done))
}

func (l loopJournal) PutSchedule(s *store.Schedule, done func(created bool, err error)) {
	l.j.PutSchedule(s, onLoop(l.b, done))
}

func (l loopJournal) RemoveSchedule(id string, done func(found bool, err error)) {
	l.j.RemoveSchedule(id, onLoop(l.b, done))
}

func (l loopJournal) PauseSchedule(id string, paused bool, done func(*store.Schedule, error)) {
	l.j.PauseSchedule(id, paused, onLoop(l.b, done))
}

func (l loopJournal) FireSchedule(id string, due, next time.Time, msgid string, done func(j *store.Job, dup bool, err error)) {
	if done == nil {
		l.j.FireSchedule(id, due, next, msgid, nil)
		return
	}
	l.j.FireSchedule(id, due, next, msgid, func(j *store.Job, dup bool, err error) { l.b.post(func() { done(j, dup, err) }) })
}

func (l loopJournal) PutQueueSettings(queue string, s store.QueueSettings, done func(error)) {
	l.j.PutQueueSettings(queue, s, onLoopErr(l.b, done))
}

func (l loopJournal) PutTenantSettings(queue, tenant string, s store.TenantSettings, done func(error)) {
	l.j.PutTenantSettings(queue, tenant, s, onLoopErr(l.b, done))
}

func (l loopJournal) PutLimiter(name string, s store.LimiterSettings, done func(error)) {
	l.j.PutLimiter(name, s, onLoopErr(l.b, done))
}

func (l loopJournal) RemoveLimiter(name string, done func(found bool, err error)) {
	l.j.RemoveLimiter(name, onLoop(l.b, done))
}

func (l loopJournal) OpenBatch(name string, open bool, done func(*store.Batch, error)) {
	l.j.OpenBatch(name, open, onLoop(l.b, done))
}

// Complete deletes (or keeps as done) a replied job; landed runs on the
// loop once the write is over. A failure is logged; the job runs again
// after a restart.
func (l loopJournal) Complete(msgid string, result []byte, keepUntil time.Time, trail []store.TrailEvent, landed func()) {
	b := l.b
	l.j.Complete(msgid, result, keepUntil, trail, func(_ bool, err error) {
		b.writeFailed(err, "journal could not delete a replied job; it will run again after a restart", msgid)
		b.post(landed)
	})
}

// RecordAttempt records a job's attempt. A failure is logged.
func (l loopJournal) RecordAttempt(msgid, reason string, notBefore time.Time, trail []store.TrailEvent) {
	b := l.b
	l.j.RecordAttempt(msgid, reason, notBefore, trail, func(_ *store.Job, err error) {
		b.writeFailed(err, "journal could not record an attempt", msgid)
	})
}

// Bury moves a job to the dead letters; landed runs on the loop once
// the write is over. A failure is logged.
func (l loopJournal) Bury(msgid, reason string, trail []store.TrailEvent, landed func()) {
	b := l.b
	l.j.Bury(msgid, reason, trail, func(_ *store.Job, err error) {
		b.writeFailed(err, "journal could not bury a job", msgid)
		b.post(landed)
	})
}
