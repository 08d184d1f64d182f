package admin

import (
	"context"
	"fmt"
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
	State       string // pending, inflight, dead, done, cancelled; "" = pending then dead
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
	case "", "waiting", "pending", "inflight", "dead", "done", "cancelled":
	default:
		return f, fmt.Errorf("%w: state %q: want waiting, pending, inflight, dead, done or cancelled", store.ErrBadFilter, f.State)
	}
	return f, nil
}

// parseLimit reads a listing's limit: 100 when v is empty, at most 10,000.
func parseLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 10000 {
		return 0, fmt.Errorf("%w: limit %q: want 1 to 10000", store.ErrBadFilter, v)
	}
	return n, nil
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

// BulkResult is what a bulk action did.
type BulkResult struct {
	Matched int  `json:"matched"` // jobs that match the filter
	Done    int  `json:"done"`    // retried or removed (0 when not confirmed)
	DryRun  bool `json:"dry_run,omitempty"`
}

// ErrNeedState is BulkRemove's answer to a filter without a stored state.
var ErrNeedState = fmt.Errorf("%w: state: bulk remove wants waiting, pending, dead, done or cancelled", store.ErrBadFilter)

// ErrCancelState is BulkCancel's answer to a filter of jobs that cannot
// be cancelled.
var ErrCancelState = fmt.Errorf("%w: state: bulk cancel wants pending (delayed and in flight included), inflight or waiting", store.ErrBadFilter)

// cancelFilter checks f for a bulk cancel and reports whether it wants
// the jobs in flight alone.
func cancelFilter(f JobFilter) (state store.State, inFlightOnly bool, err error) {
	switch f.State {
	case "", "pending":
		return store.Pending, false, nil
	case "waiting":
		return store.Waiting, false, nil
	case "inflight":
		return store.Pending, true, nil
	}
	return 0, false, ErrCancelState
}

// CancelledBy is who the trail of a job cancelled through the admin API
// says cancelled it: the admin token has no name to give.
const CancelledBy = "admin"

// bulk goes through the jobs in state that f matches (from the start:
// f.After is a listing's, not a bulk action's), 1,000 at a time, as list
// pages them, leaving out those keep refuses (nil: none), and gives each
// page to act, which returns how many it changed; with a nil act it only
// counts them (a dry run). It stops when ctx ends. Every implementation
// of the API runs its bulk actions through it.
func bulk(ctx context.Context, list func(store.ListOptions) (store.Page, error), f JobFilter, state store.State,
	keep func(*store.Job) bool, act func([]*store.Job) (int, error)) (BulkResult, error) {
	opts := f.ListOptions(time.Now())
	opts.State, opts.Limit, opts.After, opts.NoPayloads = state, 1000, "", true
	res := BulkResult{DryRun: act == nil}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		p, err := list(opts)
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

// msgids are the jobs' msgids.
func msgids(jobs []*store.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.MsgID
	}
	return ids
}
