package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Workflows in the admin API: a job's parents (header after) with their
// states and the jobs that wait for it, and batches.

// Parent is a job another waits for, with its state now ("" when it is
// no longer stored: done and not kept).
type Parent struct {
	MsgID string `json:"msgid"`
	State string `json:"state,omitempty"`
}

// BatchInfo is a batch as the admin API shows it: its counts by state
// and what it is: open (more jobs are to come), running, complete, or
// failed (complete with a job dead, cancelled or removed).
type BatchInfo struct {
	store.Batch
	State    string `json:"state"`
	InFlight int    `json:"inflight"` // of its pending jobs, those workers hold now (a running broker's)
}

// NewBatchInfo describes a batch.
func NewBatchInfo(b *store.Batch) BatchInfo {
	bi := BatchInfo{Batch: *b}
	switch {
	case b.Open:
		bi.State = "open"
	case !b.Complete():
		bi.State = "running"
	case b.Failed():
		bi.State = "failed"
	default:
		bi.State = "complete"
	}
	return bi
}

// BatchPage is a page of batches; pass Next as after for the next page.
type BatchPage struct {
	Batches []BatchInfo `json:"batches"`
	Next    string      `json:"next,omitempty"`
}

func batchPage(list []*store.Batch, next string, err error) (BatchPage, error) {
	if err != nil {
		return BatchPage{}, err
	}
	p := BatchPage{Next: next, Batches: []BatchInfo{}}
	for _, b := range list {
		p.Batches = append(p.Batches, NewBatchInfo(b))
	}
	return p, nil
}

// maxChildren is how many of the jobs waiting for one job its page lists.
const maxChildren = 1000

// withFamily adds to a job's answer its parents' states and the jobs
// that wait for it.
func withFamily(ji *JobInfo, get func(string) (*store.Job, error), children func(string, int) ([]string, error)) {
	for i, p := range ji.After {
		if j, err := get(p.MsgID); err == nil {
			ji.After[i].State = j.State.String()
		}
	}
	ji.Children, _ = children(ji.MsgID, maxChildren)
}

// family fills a JobInfo's workflow fields from its stored job.
func family(ji *JobInfo, j *store.Job) {
	ji.Batch, ji.AfterBatch, ji.Waits = j.Batch, j.AfterBatch, j.Waits
	if len(j.After) > 0 || j.AfterBatch != "" {
		ji.AfterFailed = "cancel"
		if j.RunIfFailed {
			ji.AfterFailed = "run"
		}
	}
	for _, p := range j.After {
		ji.After = append(ji.After, Parent{MsgID: p})
	}
}

func (l *Live) Batches(_ context.Context, after string, limit int) (BatchPage, error) {
	return batchPage(l.b.Batches(after, limit))
}

func (l *Live) Batch(ctx context.Context, name string) (BatchInfo, error) {
	b, inFlight, err := l.b.Batch(ctx, name)
	if err != nil {
		return BatchInfo{}, err
	}
	bi := NewBatchInfo(b)
	bi.InFlight = inFlight
	return bi, nil
}

func (l *Live) OpenBatch(ctx context.Context, name string, open bool) (BatchInfo, error) {
	b, err := l.b.OpenBatch(ctx, name, open)
	if err != nil {
		return BatchInfo{}, err
	}
	return NewBatchInfo(b), nil
}

func (o *Offline) Batches(_ context.Context, after string, limit int) (BatchPage, error) {
	return batchPage(o.j.ListBatches(after, limit))
}

func (o *Offline) Batch(_ context.Context, name string) (BatchInfo, error) {
	b, err := o.j.GetBatch(name)
	if err != nil {
		return BatchInfo{}, err
	}
	return NewBatchInfo(b), nil
}

// OpenBatch opens or closes a batch in the journal; closing one whose
// jobs are done releases what waits for it when a broker next runs.
func (o *Offline) OpenBatch(_ context.Context, name string, open bool) (BatchInfo, error) {
	b, err := store.Wait(func(done func(*store.Batch, error)) { o.j.OpenBatch(name, open, done) })
	if err != nil {
		return BatchInfo{}, err
	}
	return NewBatchInfo(b), nil
}

func (c *Client) Batches(ctx context.Context, after string, limit int) (p BatchPage, err error) {
	q := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
	return p, c.call(ctx, "GET", "/api/v1/batches?"+q.Encode(), &p)
}

func (c *Client) Batch(ctx context.Context, name string) (b BatchInfo, err error) {
	return b, c.call(ctx, "GET", "/api/v1/batches/"+url.PathEscape(name), &b)
}

func (c *Client) OpenBatch(ctx context.Context, name string, open bool) (b BatchInfo, err error) {
	action := "close"
	if open {
		action = "open"
	}
	return b, c.call(ctx, "POST", "/api/v1/batches/"+url.PathEscape(name)+"/"+action, &b)
}

func (s *Server) batchRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/batches", func(w http.ResponseWriter, r *http.Request) {
		limit, err := parseLimit(r.URL.Query().Get("limit"))
		if err != nil {
			fail(w, err)
			return
		}
		s.with(w, func(a API) {
			page, err := a.Batches(r.Context(), r.URL.Query().Get("after"), limit)
			reply(w, page, err)
		})
	})
	mux.HandleFunc("GET /api/v1/batches/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { b, err := a.Batch(r.Context(), r.PathValue("name")); reply(w, b, err) })
	})
	for _, action := range []string{"open", "close"} {
		mux.HandleFunc("POST /api/v1/batches/{name}/"+action, func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			if name == "" || len(name) > emqp.MaxBatchLen {
				fail(w, fmt.Errorf("%w: a batch name must be 1 to %d bytes", store.ErrInvalidJob, emqp.MaxBatchLen))
				return
			}
			s.with(w, func(a API) { b, err := a.OpenBatch(r.Context(), name, action == "open"); reply(w, b, err) })
		})
	}
}
