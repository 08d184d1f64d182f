package shards

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/eventmq/emq/store"
)

// tracked is a shard leader's journal, noting the msgids its writes
// touch while a move follows them (move.go): a queue is copied while it
// still serves, and what changed meanwhile is sent again once it is
// held. Every write that adds, changes or deletes a job names its msgid
// here before the journal takes it.
type tracked struct {
	store.Journal
	mu    sync.Mutex
	notes map[*changes]struct{}
}

// changes are the msgids touched since a move began to follow them (and
// how: added, changed), and the queues purged meanwhile; over when more
// were touched than it keeps (the move then copies the whole queue
// again).
type changes struct {
	ids    map[string]touch
	purged map[string]bool
	over   bool
}

// touch is how a job was touched: added (stored new) and/or changed
// (anything else: done, retried, buried, revived, removed, cancelled).
type touch uint8

const (
	added touch = 1 << iota
	changed
)

// maxChanges bounds the msgids a move keeps (about 100 bytes each).
const maxChanges = 1 << 20

// follow starts noting changes; stop ends it.
func (t *tracked) follow() (c *changes, stop func()) {
	c = &changes{ids: map[string]touch{}, purged: map[string]bool{}}
	t.mu.Lock()
	if t.notes == nil {
		t.notes = map[*changes]struct{}{}
	}
	t.notes[c] = struct{}{}
	t.mu.Unlock()
	return c, func() {
		t.mu.Lock()
		delete(t.notes, c)
		t.mu.Unlock()
	}
}

// taken returns the msgids noted so far and starts afresh.
func (t *tracked) taken(c *changes) (ids map[string]touch, purged map[string]bool, over bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids, purged, over = c.ids, c.purged, c.over
	c.ids, c.purged, c.over = map[string]touch{}, map[string]bool{}, false
	return ids, purged, over
}

func (t *tracked) note(id string, how touch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.notes {
		if len(c.ids) < maxChanges {
			c.ids[id] |= how
		} else {
			c.over = true
		}
	}
}

func (t *tracked) Append(j *store.Job, done func(bool, error)) {
	t.note(j.MsgID, added)
	t.Journal.Append(j, done)
}

func (t *tracked) Import(j *store.Job, done func(bool, error)) {
	t.note(j.MsgID, added)
	t.Journal.Import(j, done)
}

func (t *tracked) Complete(msgid string, result []byte, keepUntil time.Time, trail []store.TrailEvent, done func(bool, error)) {
	t.note(msgid, changed)
	t.Journal.Complete(msgid, result, keepUntil, trail, done)
}

func (t *tracked) Remove(msgid string, done func(bool, error)) {
	t.note(msgid, changed)
	t.Journal.Remove(msgid, done)
}

func (t *tracked) RecordAttempt(msgid, reason string, notBefore time.Time, trail []store.TrailEvent, done func(*store.Job, error)) {
	t.note(msgid, changed)
	t.Journal.RecordAttempt(msgid, reason, notBefore, trail, done)
}

func (t *tracked) Bury(msgid, reason string, trail []store.TrailEvent, done func(*store.Job, error)) {
	t.note(msgid, changed)
	t.Journal.Bury(msgid, reason, trail, done)
}

func (t *tracked) Revive(msgid string, trail []store.TrailEvent, done func(*store.Job, error)) {
	t.note(msgid, changed)
	t.Journal.Revive(msgid, trail, done)
}

func (t *tracked) Cancel(msgid string, keepUntil time.Time, trail []store.TrailEvent, done func(*store.Job, error)) {
	t.note(msgid, changed)
	t.Journal.Cancel(msgid, keepUntil, trail, done)
}

func (t *tracked) FireSchedule(id string, due, next time.Time, msgid string, done func(*store.Job, bool, error)) {
	t.note(msgid, added)
	t.Journal.FireSchedule(id, due, next, msgid, done)
}

func (t *tracked) PurgeQueue(queue string, done func(int, error)) {
	t.mu.Lock()
	for c := range t.notes {
		c.purged[queue] = true
	}
	t.mu.Unlock()
	t.Journal.PurgeQueue(queue, done)
}

// Backup, Restore and Empty are the journal's own (store.Backuper): the
// wrapper hides nothing the broker asks of its journal.
func (t *tracked) Backup(w io.Writer, h store.BackupHeader) (store.BackupStats, error) {
	bk, ok := t.Journal.(store.Backuper)
	if !ok {
		return store.BackupStats{}, errors.ErrUnsupported
	}
	return bk.Backup(w, h)
}

func (t *tracked) Restore(r io.ReadSeeker, replace bool) (store.BackupStats, error) {
	bk, ok := t.Journal.(store.Backuper)
	if !ok {
		return store.BackupStats{}, errors.ErrUnsupported
	}
	return bk.Restore(r, replace)
}

func (t *tracked) Empty() (bool, error) {
	bk, ok := t.Journal.(store.Backuper)
	if !ok {
		return false, errors.ErrUnsupported
	}
	return bk.Empty()
}

// Compact is the journal's own (store.Compactor).
func (t *tracked) Compact() (store.CompactStats, error) {
	c, ok := t.Journal.(store.Compactor)
	if !ok {
		return store.CompactStats{}, errors.ErrUnsupported
	}
	return c.Compact()
}

// tracking is the journal of this leadership, nil before it opened one.
func (mb *Member) tracking() *tracked {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.track
}
