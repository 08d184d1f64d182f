package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/eventmq/emq/store"
)

// JobFilter is a listing's query, as the admin API and emq jobs ls take
// it: where to look (Queue, State) and what to keep (the rest; a job must
// match each one set).
type JobFilter struct {
	Queue       string
	State       string // pending, inflight, dead, done; "" = pending then dead
	After       string // the Next of the previous page
	Limit       int    // 0 = 100
	MsgIDPrefix string
	Header      string        // "key" or "key:value"
	Error       string        // a substring of the last error
	OlderThan   time.Duration // stored at least this long ago
	NewerThan   time.Duration // stored at most this long ago
}

// Query is f as URL parameters.
func (f JobFilter) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"queue": f.Queue, "state": f.State, "after": f.After,
		"msgid_prefix": f.MsgIDPrefix, "header": f.Header, "error": f.Error} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.OlderThan > 0 {
		q.Set("older_than", f.OlderThan.String())
	}
	if f.NewerThan > 0 {
		q.Set("newer_than", f.NewerThan.String())
	}
	return q
}

// ParseJobFilter reads a filter from URL parameters; a bad one is named.
func ParseJobFilter(q url.Values) (JobFilter, error) {
	f := JobFilter{Queue: q.Get("queue"), State: q.Get("state"), After: q.Get("after"),
		MsgIDPrefix: q.Get("msgid_prefix"), Header: q.Get("header"), Error: q.Get("error")}
	if v := q.Get("limit"); v != "" {
		var err error
		if f.Limit, err = parseLimit(v); err != nil {
			return f, err
		}
	}
	for key, dst := range map[string]*time.Duration{"older_than": &f.OlderThan, "newer_than": &f.NewerThan} {
		if v := q.Get(key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return f, fmt.Errorf("%w: %s %q: want a duration such as 90s or 2h", store.ErrBadFilter, key, v)
			}
			*dst = d
		}
	}
	switch f.State {
	case "", "pending", "inflight", "dead", "done":
	default:
		return f, fmt.Errorf("%w: state %q: want pending, inflight, dead or done", store.ErrBadFilter, f.State)
	}
	return f, nil
}

// ListOptions is f for the journal, ages counted from now (not State
// inflight, which the journal does not know).
func (f JobFilter) ListOptions(now time.Time) store.ListOptions {
	o := store.ListOptions{Queue: f.Queue, After: f.After, Limit: f.Limit, MsgIDPrefix: f.MsgIDPrefix, Header: f.Header, Error: f.Error}
	o.State, _ = store.ParseState(f.State)
	if f.OlderThan > 0 {
		o.EnqueuedBefore = now.Add(-f.OlderThan)
	}
	if f.NewerThan > 0 {
		o.EnqueuedAfter = now.Add(-f.NewerThan)
	}
	return o
}

// BulkResult is what a bulk action on dead jobs did.
type BulkResult struct {
	Matched int  `json:"matched"` // jobs that match the filter
	Done    int  `json:"done"`    // retried or removed (0 when not confirmed)
	DryRun  bool `json:"dry_run,omitempty"`
}

// BulkDead retries (or, with remove, deletes) every dead job that matches
// f, a page of the journal at a time, its writes sharing commits. Not
// confirmed, it only counts them.
func (b *Broker) BulkDead(ctx context.Context, f JobFilter, remove, confirmed bool) (BulkResult, error) {
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) { return b.deadMany(ctx, jobs, remove) }
	}
	return DeadPages(b.journal, f, act)
}

// DeadPages goes through the dead jobs f matches in journal, 1,000 at a
// time, and gives each page to act, which returns how many it retried or
// removed; with a nil act it only counts them (a dry run).
func DeadPages(journal store.Journal, f JobFilter, act func([]*store.Job) (int, error)) (BulkResult, error) {
	return JobPages(context.Background(), journal, f, store.Dead, nil, act)
}

// JobPages goes through the jobs in state that f matches in journal (from
// the start: f.After is a listing's, not a bulk action's), 1,000 at a
// time, leaving out those keep refuses (nil: none), and gives each page
// to act, which returns how many it changed; with a nil act it only
// counts them (a dry run). It stops when ctx ends.
func JobPages(ctx context.Context, journal store.Journal, f JobFilter, state store.State,
	keep func(*store.Job) bool, act func([]*store.Job) (int, error)) (BulkResult, error) {
	opts := f.ListOptions(time.Now())
	opts.State, opts.Limit, opts.After, opts.NoPayloads = state, 1000, "", true
	res := BulkResult{DryRun: act == nil}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		p, err := journal.List(opts)
		if err != nil {
			return res, err
		}
		jobs := p.Jobs
		if keep != nil {
			jobs = slices.DeleteFunc(jobs, func(j *store.Job) bool { return !keep(j) })
		}
		res.Matched += len(jobs)
		if act != nil && len(jobs) > 0 {
			n, err := act(jobs)
			res.Done += n
			if err != nil {
				return res, err
			}
		}
		if p.Next == "" {
			return res, nil
		}
		opts.After = p.Next
	}
}

// deadMany revives or removes jobs, their writes queued at once.
func (b *Broker) deadMany(ctx context.Context, jobs []*store.Job, remove bool) (int, error) {
	results := make(chan error, len(jobs))
	err := b.onLoop(ctx, func() {
		for _, j := range jobs {
			if remove {
				if b.jobs[j.MsgID] != nil { // revived since it was listed: no longer dead
					results <- errGone
					continue
				}
				b.journal.Remove(j.MsgID, func(found bool, err error) {
					b.adminWriteFailed(err, "journal could not remove a dead job", j.MsgID)
					if err == nil && !found {
						err = errGone
					}
					results <- err
				})
				continue
			}
			b.revive(j.MsgID, func(err error) { results <- err })
		}
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for range jobs {
		select {
		case err := <-results:
			switch {
			case err == nil:
				n++
			case first == nil && !isGone(err): // one retried or removed meanwhile is not a failure
				first = err
			}
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, first
}

// errGone: a listed dead job was removed or revived meanwhile.
var errGone = fmt.Errorf("%w: no longer dead", store.ErrWrongState)

// isGone: the job is not there, or no longer dead.
func isGone(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrWrongState)
}

// bulkRoutes serve POST /api/v1/dead/retry and /api/v1/dead/remove with a
// filter's parameters; without confirm=yes they only count.
func (b *Broker) bulkRoutes(mux *http.ServeMux) {
	for action, remove := range map[string]bool{"retry": false, "remove": true} {
		mux.HandleFunc("POST /api/v1/dead/"+action, func(w http.ResponseWriter, r *http.Request) {
			f, err := ParseJobFilter(r.URL.Query())
			if err != nil {
				reply(w, nil, err)
				return
			}
			res, err := b.BulkDead(r.Context(), f, remove, r.URL.Query().Get("confirm") == "yes")
			reply(w, res, err)
		})
	}
}
