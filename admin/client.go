package admin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/store"
)

// ClientOptions say how to reach a broker's admin API.
type ClientOptions struct {
	Addr  string // host:port, http://host:port or https://host:port
	Token string // the admin token or the read-only one ("" = none)
	CA    string // with https: a CA certificate file (PEM) to trust for the broker's
	// Timeout bounds each request but the event stream's (30 s).
	Timeout time.Duration
}

// Client is the API over HTTP, on a broker's admin listener: what emq's
// admin commands use. Its errors carry the API's own words and match
// the errors of the other implementations (errors.Is).
type Client struct {
	base, token string
	http        *http.Client
}

var _ API = (*Client)(nil)

// NewClient makes a Client; an error names the option (as its flag).
func NewClient(o ClientOptions) (*Client, error) {
	base := o.Addr
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.CA != "" && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("admin-ca: only for an https:// --admin (the admin address is %s)", base)
	} else if o.CA != "" {
		pem, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("admin-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("admin-ca: %s holds no PEM certificate", o.CA)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	return &Client{base: strings.TrimSuffix(base, "/"), token: o.Token,
		http: &http.Client{Timeout: o.Timeout, Transport: tr}}, nil
}

func (c *Client) call(ctx context.Context, method, path string, out any) error {
	return c.send(ctx, method, path, nil, out)
}

// send calls the API with in (if not nil) as the JSON body, and decodes
// the answer into out (if not nil).
func (c *Client) send(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(c.http, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(answer, out)
}

// do sends req with the token and the admin header through client, and
// turns a refusal into an *Error with the API's own words. A 200's body
// is the caller's to read and close.
func (c *Client) do(client *http.Client, req *http.Request) (*http.Response, error) {
	return c.doWant(client, req, http.StatusOK)
}

// doWant is do for a route whose success is status want (202: started).
func (c *Client) doWant(client *http.Client, req *http.Request, want int) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set(Header, "emq") // a program, not another site's page
	resp, err := client.Do(req)
	var untrusted *tls.CertificateVerificationError
	switch {
	case errors.As(err, &untrusted):
		return nil, fmt.Errorf("the broker at %s has a certificate this machine does not trust (%v): pass its CA with --admin-ca FILE", c.base, untrusted.Err)
	case err != nil && req.Context().Err() != nil:
		return nil, req.Context().Err()
	case err != nil:
		return nil, fmt.Errorf("no broker answered at %s (%v); is it running? For the journal of a stopped broker use --data-dir DIR", c.base, errors.Unwrap(err))
	}
	if resp.StatusCode == want {
		return resp, nil
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode}
	var body apiError
	if json.Unmarshal(answer, &body) != nil || body.Error == "" {
		body.Error = strings.TrimSpace(string(answer))
	}
	e.Code, e.Text = body.Code, body.Error
	if resp.StatusCode == http.StatusUnauthorized {
		e.Text = fmt.Sprintf("the broker at %s refused the admin token: %s", c.base, body.Error)
	}
	return nil, e
}

func (c *Client) Stats(ctx context.Context) (s StatsInfo, err error) {
	return s, c.call(ctx, "GET", "/api/v1/stats", &s)
}

func (c *Client) Queues(ctx context.Context) (qs []broker.QueueInfo, err error) {
	return qs, c.call(ctx, "GET", "/api/v1/queues", &qs)
}

func (c *Client) Workers(ctx context.Context) (ws []broker.WorkerInfo, err error) {
	return ws, c.call(ctx, "GET", "/api/v1/workers", &ws)
}

func (c *Client) Overview(ctx context.Context) (o Overview, err error) {
	return o, c.call(ctx, "GET", "/api/v1/overview", &o)
}

func (c *Client) Jobs(ctx context.Context, f JobFilter) (p JobPage, err error) {
	return p, c.call(ctx, "GET", "/api/v1/jobs?"+f.Query().Encode(), &p)
}

func (c *Client) Job(ctx context.Context, msgid string, payload bool) (j JobInfo, err error) {
	if msgid == "" {
		return j, errNoMsgID
	}
	return j, c.call(ctx, "GET", jobPath(msgid)+"?payload="+strconv.FormatBool(payload), &j)
}

// download reads a whole body.
func (c *Client) download(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(c.http, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func (c *Client) Payload(ctx context.Context, msgid string) ([]byte, error) {
	if msgid == "" {
		return nil, errNoMsgID
	}
	return c.download(ctx, jobPath(msgid)+"/payload")
}

func (c *Client) Result(ctx context.Context, msgid string) ([]byte, error) {
	if msgid == "" {
		return nil, errNoMsgID
	}
	return c.download(ctx, jobPath(msgid)+"/result")
}

func (c *Client) RemoveJob(ctx context.Context, msgid string) error {
	if msgid == "" {
		return errNoMsgID
	}
	return c.call(ctx, "DELETE", jobPath(msgid), nil)
}

func (c *Client) RetryJob(ctx context.Context, msgid string) error {
	if msgid == "" {
		return errNoMsgID
	}
	return c.call(ctx, "POST", jobPath(msgid)+"/retry", nil)
}

func (c *Client) BulkDead(ctx context.Context, f JobFilter, remove, confirmed bool) (r BulkResult, err error) {
	action, q := "retry", f.Query()
	if remove {
		action = "remove"
	}
	if confirmed {
		q.Set("confirm", "yes")
	}
	return r, c.call(ctx, "POST", "/api/v1/dead/"+action+"?"+q.Encode(), &r)
}

func (c *Client) BulkRemove(ctx context.Context, f JobFilter, confirmed bool) (r BulkResult, err error) {
	q := f.Query()
	if confirmed {
		q.Set("confirm", "yes")
	}
	return r, c.call(ctx, "POST", "/api/v1/jobs/remove?"+q.Encode(), &r)
}

func (c *Client) CancelJob(ctx context.Context, msgid string) (j JobInfo, err error) {
	if msgid == "" {
		return j, errNoMsgID
	}
	return j, c.call(ctx, "POST", jobPath(msgid)+"/cancel", &j)
}

func (c *Client) BulkCancel(ctx context.Context, f JobFilter, confirmed bool) (r BulkResult, err error) {
	q := f.Query()
	if confirmed {
		q.Set("confirm", "yes")
	}
	return r, c.call(ctx, "POST", "/api/v1/jobs/cancel?"+q.Encode(), &r)
}

func (c *Client) PurgeQueue(ctx context.Context, queue string) (int, error) {
	var r struct{ Removed int }
	err := c.call(ctx, "POST", "/api/v1/queues/"+url.PathEscape(queue)+"/purge?confirm="+url.QueryEscape(queue), &r)
	return r.Removed, err
}

func (c *Client) ChangeQueue(ctx context.Context, queue string, ch broker.QueueChange) (qi broker.QueueInfo, err error) {
	return qi, c.send(ctx, "POST", "/api/v1/queues/"+url.PathEscape(queue)+"/settings", ch, &qi)
}

func (c *Client) Tenants(ctx context.Context, queue string, offset, limit int) (p broker.TenantPage, err error) {
	q := url.Values{"offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(limit)}}
	return p, c.call(ctx, "GET", "/api/v1/queues/"+url.PathEscape(queue)+"/tenants?"+q.Encode(), &p)
}

// ChangeTenant sends PATCH .../tenants/NAME; the tenant "" is the path
// ending in /tenants/.
func (c *Client) ChangeTenant(ctx context.Context, queue, tenant string, ch broker.TenantChange) (s store.TenantSettings, err error) {
	return s, c.send(ctx, "PATCH", "/api/v1/queues/"+url.PathEscape(queue)+"/tenants/"+url.PathEscape(tenant), ch, &s)
}

func (c *Client) Limiters(ctx context.Context) (ls []broker.LimiterInfo, err error) {
	return ls, c.call(ctx, "GET", "/api/v1/limiters", &ls)
}

func (c *Client) SetLimiter(ctx context.Context, name string, s store.LimiterSettings) error {
	return c.send(ctx, "PUT", "/api/v1/limiters/"+url.PathEscape(name), s, nil)
}

func (c *Client) RemoveLimiter(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", "/api/v1/limiters/"+url.PathEscape(name), nil)
}

func (c *Client) Why(ctx context.Context, msgid string) (w broker.Why, err error) {
	if msgid == "" {
		return w, errNoMsgID
	}
	return w, c.call(ctx, "GET", jobPath(msgid)+"/why", &w)
}

// ImportJobs sends jobs of queue, as another shard's journal holds them,
// to the broker, which stores those it does not hold yet
// (broker.ImportJobs). It needs the full admin token.
func (c *Client) ImportJobs(ctx context.Context, queue string, jobs []*store.Job) (int, error) {
	var r ImportResult
	err := c.send(ctx, "POST", "/api/v1/queues/"+url.PathEscape(queue)+"/import", jobs, &r)
	return r.Imported, err
}

// ForgetJobs has the broker delete the jobs of queue among msgids that
// it holds (broker.ForgetJobs); how many it deleted.
func (c *Client) ForgetJobs(ctx context.Context, queue string, msgids []string) (int, error) {
	var r ImportResult
	err := c.send(ctx, "POST", "/api/v1/queues/"+url.PathEscape(queue)+"/forget", map[string][]string{"msgids": msgids}, &r)
	return r.Imported, err
}

// Role is what the broker is in its group (group.RoleNone for a broker
// on its own) and the version of the shards' placement it serves by.
func (c *Client) Role(ctx context.Context) (group.Role, int64, error) {
	st, err := c.Stats(ctx)
	if err != nil || st.Group == nil {
		return group.RoleNone, 0, err
	}
	return st.Group.Role, st.Group.Placement, nil
}

// EachJobID calls fn with the msgid of each job of queue the broker
// holds (pending, delayed, dead, done), a page at a time.
func (c *Client) EachJobID(ctx context.Context, queue string, fn func(msgid string)) error {
	for after := ""; ; {
		page, err := c.Jobs(ctx, JobFilter{Queue: queue, After: after, Limit: 1000})
		if err != nil {
			return err
		}
		for _, j := range page.Jobs {
			fn(j.MsgID)
		}
		if after = page.Next; after == "" {
			return nil
		}
	}
}

// errNoMsgID refuses a job's request without a msgid before it is sent:
// "/api/v1/jobs//retry" would reach another route once the path is
// cleaned.
var errNoMsgID = errors.New("a msgid is needed (it is empty)")

// jobPath is the path of the job msgid.
func jobPath(msgid string) string { return "/api/v1/jobs/" + url.PathEscape(msgid) }

// ImportSchedule sends a schedule, as another shard's journal holds it,
// to the broker, which keeps it as it was (broker.ImportSchedule).
func (c *Client) ImportSchedule(ctx context.Context, s *store.Schedule) error {
	return c.send(ctx, "POST", "/api/v1/queues/"+url.PathEscape(s.Queue)+"/import-schedule", s, nil)
}

func (c *Client) Compact(ctx context.Context) (store.CompactStats, error) {
	var r struct {
		Before int64 `json:"size_before"`
		After  int64 `json:"size_after"`
	}
	err := c.call(ctx, "POST", "/api/v1/compact", &r)
	return store.CompactStats{Before: r.Before, After: r.After}, err
}

func (c *Client) Schedules(ctx context.Context, after string, limit int) (p SchedulePage, err error) {
	q := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
	return p, c.call(ctx, "GET", "/api/v1/schedules?"+q.Encode(), &p)
}

func (c *Client) Schedule(ctx context.Context, id string, payload bool) (s ScheduleInfo, err error) {
	return s, c.call(ctx, "GET", "/api/v1/schedules/"+url.PathEscape(id)+"?payload="+strconv.FormatBool(payload), &s)
}

func (c *Client) AddSchedule(ctx context.Context, sp ScheduleSpec) (s ScheduleInfo, err error) {
	return s, c.send(ctx, "POST", "/api/v1/schedules", sp, &s)
}

func (c *Client) RemoveSchedule(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/api/v1/schedules/"+url.PathEscape(id), nil)
}

func (c *Client) PauseSchedule(ctx context.Context, id string, paused bool) error {
	action := "resume"
	if paused {
		action = "pause"
	}
	return c.call(ctx, "POST", "/api/v1/schedules/"+url.PathEscape(id)+"/"+action, nil)
}

// Events follows GET /api/v1/events, with no timeout but ctx's.
func (c *Client) Events(ctx context.Context, queue, msgid string) (Events, error) {
	q := url.Values{}
	for k, v := range map[string]string{"queue": queue, "msgid": msgid} {
		if v != "" {
			q.Set(k, v)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/events?"+q.Encode(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := c.do(&http.Client{Transport: c.http.Transport}, req) // no timeout: it follows
	if err != nil {
		cancel()
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return &sseEvents{body: resp.Body, sc: sc, cancel: cancel}, nil
}

// sseEvents reads an event stream of Server-Sent Events.
type sseEvents struct {
	body   io.Closer
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

// Next returns the next event; a stream ended with "dropped" is its
// reason (broker.ErrDropped or broker.ErrStopped when it names them).
// The stream's own context is the one Events was given.
func (s *sseEvents) Next(context.Context) ([]broker.Event, error) {
	kind := ""
	for s.sc.Scan() {
		line := s.sc.Text()
		if k, ok := strings.CutPrefix(line, "event: "); ok {
			kind = k
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if kind == "dropped" {
			var d struct{ Reason string }
			if json.Unmarshal([]byte(data), &d) != nil || d.Reason == "" {
				d.Reason = data
			}
			for _, known := range []error{broker.ErrDropped, broker.ErrStopped} {
				if d.Reason == known.Error() {
					return nil, fmt.Errorf("the event stream ended: %w", known)
				}
			}
			return nil, fmt.Errorf("the event stream ended: %s", d.Reason)
		}
		var e broker.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return nil, fmt.Errorf("event %q: %w", data, err)
		}
		return []broker.Event{e}, nil
	}
	if err := s.sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the event stream ended")
}

func (s *sseEvents) Close() {
	s.cancel()
	s.body.Close()
}

// Close does nothing: a Client holds no connection of its own.
func (c *Client) Close() error { return nil }

var _ shards.Peer = (*Client)(nil)
