package main

import (
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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/etcdstore"
)

// admin is what the admin commands need, from a running broker's HTTP API
// (online) or from a journal file no broker holds (offline).
type admin interface {
	Stats() (*broker.StatsInfo, []broker.QueueInfo, error) // counters are nil offline
	Queues() ([]broker.QueueInfo, error)
	Workers() ([]broker.WorkerInfo, error)
	Jobs(f broker.JobFilter) (broker.JobPage, error)
	BulkDead(f broker.JobFilter, remove, confirmed bool) (broker.BulkResult, error)
	Job(msgid string, payload bool) (broker.JobInfo, error)
	Remove(msgid string) error
	Retry(msgid string) error
	Purge(queue string) (int, error)
	Compact() (before, after int64, err error)
	Schedules(after string, limit int) (broker.SchedulePage, error)
	Schedule(id string, payload bool) (broker.ScheduleInfo, error)
	AddSchedule(sp broker.ScheduleSpec) (broker.ScheduleInfo, error)
	RemoveSchedule(id string) error
	PauseSchedule(id string, paused bool) error
	ChangeQueue(queue string, c broker.QueueChange) (broker.QueueInfo, error)
	Close() error
}

// adminFlags adds the flags of every admin command.
func adminFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.String("admin", broker.DefaultOptions().Admin, "a running broker's admin address (host:port, or https://host:port)")
	f.String("admin-token", "", "the broker's admin token, or its read-only token (or EMQ_ADMIN_TOKEN)")
	f.String("admin-ca", "", "with https: trust this CA certificate (PEM) for the broker's")
	f.String("data-dir", "", "use the journal in this directory directly (the broker must be stopped)")
	addEtcdFlags(f, "use a group's journal in etcd directly, at these client URLs (comma-separated; no broker of the group may be running)")
	f.Bool("json", false, "print JSON instead of a table")
}

// openAdmin returns the offline admin when --data-dir is given, the
// online one otherwise.
func openAdmin(cmd *cobra.Command) (admin, *config, error) {
	c, err := loadConfig(cmd.Flags(), "")
	if err != nil {
		return nil, nil, err
	}
	if c.str("etcd-endpoints") != "" {
		a, err := openOfflineEtcd(c)
		return a, c, err
	}
	if dir := c.str("data-dir"); dir != "" {
		a, err := openOffline(dir, c.str("admin"))
		return a, c, err
	}
	base := c.str("admin")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ca := c.str("admin-ca"); ca != "" && !strings.HasPrefix(base, "https://") {
		return nil, nil, fmt.Errorf("admin-ca: only for an https:// --admin (the admin address is %s)", base)
	} else if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, nil, fmt.Errorf("admin-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("admin-ca: %s holds no PEM certificate", ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &online{base: strings.TrimSuffix(base, "/"), token: c.str("admin-token"),
		http: &http.Client{Timeout: 30 * time.Second, Transport: tr}}, c, nil
}

// online talks to a broker's admin API.
type online struct {
	base, token string
	http        *http.Client
}

func (o *online) call(method, path string, out any) error { return o.send(method, path, nil, out) }

// send calls the API with in (if not nil) as the JSON body.
func (o *online) send(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, o.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.do(o.http, req)
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
// turns a refusal into an error with the API's own words. A 200's body
// is the caller's to read and close.
func (o *online) do(client *http.Client, req *http.Request) (*http.Response, error) {
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
	req.Header.Set(broker.AdminHeader, "emq") // a program, not another site's page
	resp, err := client.Do(req)
	var untrusted *tls.CertificateVerificationError
	switch {
	case errors.As(err, &untrusted):
		return nil, fmt.Errorf("the broker at %s has a certificate this machine does not trust (%v): pass its CA with --admin-ca FILE", o.base, untrusted.Err)
	case err != nil:
		return nil, fmt.Errorf("no broker answered at %s (%v); is it running? For the journal of a stopped broker use --data-dir DIR", o.base, errors.Unwrap(err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct{ Error string }
	if json.Unmarshal(answer, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(answer))
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("the broker at %s refused the admin token: %s", o.base, e.Error)
	}
	return nil, errors.New(e.Error)
}

func (o *online) Stats() (*broker.StatsInfo, []broker.QueueInfo, error) {
	var s broker.StatsInfo
	if err := o.call("GET", "/api/v1/stats", &s); err != nil {
		return nil, nil, err
	}
	qs, err := o.Queues()
	return &s, qs, err
}

func (o *online) Queues() (qs []broker.QueueInfo, err error) {
	return qs, o.call("GET", "/api/v1/queues", &qs)
}

func (o *online) Workers() (ws []broker.WorkerInfo, err error) {
	return ws, o.call("GET", "/api/v1/workers", &ws)
}

func (o *online) Jobs(f broker.JobFilter) (p broker.JobPage, err error) {
	return p, o.call("GET", "/api/v1/jobs?"+f.Query().Encode(), &p)
}

func (o *online) BulkDead(f broker.JobFilter, remove, confirmed bool) (r broker.BulkResult, err error) {
	action, q := "retry", f.Query()
	if remove {
		action = "remove"
	}
	if confirmed {
		q.Set("confirm", "yes")
	}
	return r, o.call("POST", "/api/v1/dead/"+action+"?"+q.Encode(), &r)
}

func (o *online) Job(msgid string, payload bool) (j broker.JobInfo, err error) {
	return j, o.call("GET", "/api/v1/jobs/"+url.PathEscape(msgid)+"?payload="+strconv.FormatBool(payload), &j)
}

func (o *online) Remove(msgid string) error {
	return o.call("DELETE", "/api/v1/jobs/"+url.PathEscape(msgid), nil)
}

func (o *online) Retry(msgid string) error {
	return o.call("POST", "/api/v1/jobs/"+url.PathEscape(msgid)+"/retry", nil)
}

func (o *online) Purge(queue string) (int, error) {
	var r struct{ Removed int }
	err := o.call("POST", "/api/v1/queues/"+url.PathEscape(queue)+"/purge?confirm="+url.QueryEscape(queue), &r)
	return r.Removed, err
}

func (o *online) Compact() (int64, int64, error) {
	var r struct {
		Before int64 `json:"size_before"`
		After  int64 `json:"size_after"`
	}
	err := o.call("POST", "/api/v1/compact", &r)
	return r.Before, r.After, err
}

func (o *online) Schedules(after string, limit int) (p broker.SchedulePage, err error) {
	q := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
	return p, o.call("GET", "/api/v1/schedules?"+q.Encode(), &p)
}

func (o *online) Schedule(id string, payload bool) (s broker.ScheduleInfo, err error) {
	return s, o.call("GET", "/api/v1/schedules/"+url.PathEscape(id)+"?payload="+strconv.FormatBool(payload), &s)
}

func (o *online) AddSchedule(sp broker.ScheduleSpec) (s broker.ScheduleInfo, err error) {
	return s, o.send("POST", "/api/v1/schedules", sp, &s)
}

func (o *online) RemoveSchedule(id string) error {
	return o.call("DELETE", "/api/v1/schedules/"+url.PathEscape(id), nil)
}

func (o *online) PauseSchedule(id string, paused bool) error {
	action := "resume"
	if paused {
		action = "pause"
	}
	return o.call("POST", "/api/v1/schedules/"+url.PathEscape(id)+"/"+action, nil)
}

func (o *online) ChangeQueue(queue string, c broker.QueueChange) (qi broker.QueueInfo, err error) {
	return qi, o.send("POST", "/api/v1/queues/"+url.PathEscape(queue)+"/settings", c, &qi)
}

func (o *online) Close() error { return nil }

// offline works on the journal of a stopped broker: its file, or a
// group's journal in etcd.
type offline struct {
	j       store.Journal
	release func() // after the journal's Close: ends what opening held
}

func openOffline(dir, adminAddr string) (*offline, error) {
	path := filepath.Join(dir, broker.JournalFile)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no journal at %s (is --data-dir right?): %w", path, err)
	}
	opts := boltstore.DefaultOptions()
	opts.LockTimeout = 500 * time.Millisecond
	j, err := boltstore.Open(path, opts)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("the journal %s is in use by a running broker: manage it online with --admin %s (its admin address), or stop the broker first", path, adminAddr)
	}
	if err != nil {
		return nil, err
	}
	return &offline{j: j}, nil
}

// openOfflineEtcd opens a group's journal in etcd when no broker of the
// group leads: it is elected itself for as long as it works, so that its
// writes are fenced as a broker's are and no broker leads meanwhile.
func openOfflineEtcd(c *config) (*offline, error) {
	g, err := groupOptions(c)
	if err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	cli, err := broker.NewGroupClient(g)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*offline, error) { cli.Close(); return nil, err }
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout)
	defer cancel()
	leader, err := cli.Get(ctx, broker.LeaderPrefix(g.Prefix), clientv3.WithFirstCreate()...)
	if err != nil {
		return fail(fmt.Errorf("etcd-endpoints %s: %w", strings.Join(g.Endpoints, ","), err))
	}
	if len(leader.Kvs) > 0 {
		return fail(fmt.Errorf("%s leads the group on etcd %s: manage its journal online with --admin (its admin address), or stop the group's brokers first",
			leader.Kvs[0].Value, g.Prefix))
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(int(g.LeaderTTL/time.Second)))
	if err != nil {
		return fail(fmt.Errorf("etcd session: %w", err))
	}
	el := concurrency.NewElection(session, broker.LeaderPrefix(g.Prefix))
	host, _ := os.Hostname()
	if err := el.Campaign(ctx, fmt.Sprintf("emq admin (%s:%d)", host, os.Getpid())); err != nil {
		session.Close()
		return fail(fmt.Errorf("a broker of the group started meanwhile (%w): use --admin", err))
	}
	opts := g.JournalOptions(el)
	opts.CompactEvery = 0 // the broker's task
	release := func() {
		rctx, rcancel := context.WithTimeout(context.Background(), g.Timeout)
		defer rcancel()
		_ = el.Resign(rctx)
		session.Close()
		cli.Close()
	}
	j, err := etcdstore.Open(cli, opts)
	if err != nil {
		release()
		return nil, err
	}
	return &offline{j: j, release: release}, nil
}

var errNeedsBroker = errors.New("only a running broker knows this: use --admin instead of --data-dir")

func (o *offline) Stats() (*broker.StatsInfo, []broker.QueueInfo, error) {
	qs, err := o.Queues()
	return nil, qs, err
}

func (o *offline) Queues() ([]broker.QueueInfo, error) {
	counts, err := o.j.Counts()
	if err != nil {
		return nil, err
	}
	controls, err := o.j.QueueSettings()
	if err != nil {
		return nil, err
	}
	qs := make([]broker.QueueInfo, 0, len(counts))
	for _, c := range counts {
		qs = append(qs, broker.QueueInfo{Name: c.Queue, Pending: c.Pending, Dead: c.Dead, Done: c.Done}.WithControls(controls[c.Queue]))
		delete(controls, c.Queue)
	}
	for name, s := range controls { // controlled, no job stored
		if !s.IsZero() {
			qs = append(qs, broker.QueueInfo{Name: name}.WithControls(s))
		}
	}
	sort.Slice(qs, func(i, k int) bool { return qs[i].Name < qs[k].Name })
	return qs, nil
}

// ChangeQueue changes a queue's stored controls; the broker that opens
// the journal next applies them.
func (o *offline) ChangeQueue(queue string, c broker.QueueChange) (broker.QueueInfo, error) {
	controls, err := o.j.QueueSettings()
	if err != nil {
		return broker.QueueInfo{}, err
	}
	s := c.Apply(controls[queue])
	if _, err := store.Wait(func(done func(struct{}, error)) {
		o.j.PutQueueSettings(queue, s, func(err error) { done(struct{}{}, err) })
	}); err != nil {
		return broker.QueueInfo{}, err
	}
	return broker.QueueInfo{Name: queue}.WithControls(s), nil
}

func (o *offline) Workers() ([]broker.WorkerInfo, error) { return nil, errNeedsBroker }

func (o *offline) Jobs(f broker.JobFilter) (broker.JobPage, error) {
	if f.State == "inflight" {
		return broker.JobPage{}, errNeedsBroker
	}
	p, err := o.j.List(f.ListOptions(time.Now()))
	if err != nil {
		return broker.JobPage{}, err
	}
	page := broker.JobPage{Next: p.Next}
	for _, j := range p.Jobs {
		page.Jobs = append(page.Jobs, broker.NewJobInfo(j, "", false))
	}
	return page, nil
}

// BulkDead retries or removes the matching dead jobs in the journal, a
// page at a time, each page's writes queued at once.
func (o *offline) BulkDead(f broker.JobFilter, remove, confirmed bool) (broker.BulkResult, error) {
	if !confirmed {
		return broker.DeadPages(o.j, f, nil)
	}
	return broker.DeadPages(o.j, f, func(jobs []*store.Job) (int, error) {
		errs := make(chan error, len(jobs))
		for _, j := range jobs {
			if remove {
				o.j.Remove(j.MsgID, func(_ bool, err error) { errs <- err })
			} else {
				o.j.Revive(j.MsgID, broker.AdminRevived(), func(_ *store.Job, err error) { errs <- err })
			}
		}
		done := 0
		for range jobs {
			if err := <-errs; err != nil {
				return done, err
			}
			done++
		}
		return done, nil
	})
}

func (o *offline) Job(msgid string, payload bool) (broker.JobInfo, error) {
	j, err := o.j.Get(msgid)
	if err != nil {
		return broker.JobInfo{}, err
	}
	return broker.JobInfoFrom(o.j, j, "", payload), nil
}

func (o *offline) Remove(msgid string) error {
	found, err := store.Wait(func(done func(bool, error)) { o.j.Remove(msgid, done) })
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", store.ErrNotFound, msgid)
	}
	return err
}

func (o *offline) Retry(msgid string) error {
	_, err := store.Wait(func(done func(*store.Job, error)) { o.j.Revive(msgid, broker.AdminRevived(), done) })
	return err
}

func (o *offline) Purge(queue string) (int, error) {
	return store.Wait(func(done func(int, error)) { o.j.PurgeQueue(queue, done) })
}

func (o *offline) Compact() (int64, int64, error) {
	c, ok := o.j.(store.Compactor)
	if !ok {
		return 0, 0, fmt.Errorf("%w: the journal in etcd needs no compaction by emq (the broker compacts etcd's history; defragment etcd with etcdctl defrag)", errors.ErrUnsupported)
	}
	st, err := c.Compact()
	return st.Before, st.After, err
}

func (o *offline) Schedules(after string, limit int) (broker.SchedulePage, error) {
	return broker.ListSchedules(o.j, after, limit)
}

func (o *offline) Schedule(id string, payload bool) (broker.ScheduleInfo, error) {
	s, err := o.j.GetSchedule(id)
	if err != nil {
		return broker.ScheduleInfo{}, err
	}
	return broker.NewScheduleInfo(s, payload), nil
}

// AddSchedule stores a schedule for the broker to keep when it starts;
// the same schedule as one stored is left as it is.
func (o *offline) AddSchedule(sp broker.ScheduleSpec) (broker.ScheduleInfo, error) {
	s, err := sp.Schedule(time.Now())
	if err != nil {
		return broker.ScheduleInfo{}, err
	}
	if old, err := o.j.GetSchedule(s.ID); err == nil && broker.SameSchedule(old, s) {
		return broker.NewScheduleInfo(old, false), nil
	}
	if _, err := store.Wait(func(done func(bool, error)) { o.j.PutSchedule(s, done) }); err != nil {
		return broker.ScheduleInfo{}, err
	}
	return broker.NewScheduleInfo(s, false), nil
}

func (o *offline) RemoveSchedule(id string) error {
	found, err := store.Wait(func(done func(bool, error)) { o.j.RemoveSchedule(id, done) })
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", store.ErrNoSchedule, id)
	}
	return err
}

func (o *offline) PauseSchedule(id string, paused bool) error {
	_, err := store.Wait(func(done func(*store.Schedule, error)) { o.j.PauseSchedule(id, paused, done) })
	return err
}

func (o *offline) Close() error {
	err := o.j.Close()
	if o.release != nil {
		o.release()
	}
	return err
}
