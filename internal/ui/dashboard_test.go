package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store/storetest"
	"github.com/eventmq/emq/worker"
)

// stored is a broker with jobs in every state: in queue emails one each
// pending, delayed, in flight (held by worker w), dead and done; queue
// reports paused with limits and three pending jobs; one schedule.
type stored struct {
	b                                      *bt.Broker
	client, worker                         *bt.Peer
	pending, delayed, inflight, dead, done string
	schedule                               string
	token                                  string // the full admin token, if any
}

func start(t *testing.T, token, readToken string) *stored {
	t.Helper()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		o.HeartbeatInterval, o.HeartbeatTimeout = 50*time.Millisecond, 2*time.Second
		o.RetryBackoff, o.ResultTTL = 10*time.Millisecond, time.Hour
	}, func(o *admin.Options) { o.Token, o.ReadToken = token, readToken })
	s := &stored{b: b, token: token}
	s.client = bt.Dial(t, b.Frontend(), "c")
	s.worker = bt.Worker(t, b.Backend(), "w", `[[10,"emails"],[5,"reports"]]`)
	s.dead = s.bury(t, "emails", "smtp: 550 mailbox unavailable")
	s.done = s.client.Request("emails", "reply-requested", []byte(`{"to":"ann@example.com","subject":"Welcome"}`))
	s.worker.Ready(1)
	bt.Expect[*emqp.Request](s.worker)
	s.worker.Reply(s.done, []byte(`{"sent":true,"id":"m-1"}`))
	bt.Expect[*emqp.Reply](s.client)
	s.inflight = s.client.Request("emails", "timeout:3600", []byte(`{"to":"bob@example.com","subject":"Invoice 42"}`))
	s.worker.Ready(1)
	bt.Expect[*emqp.Request](s.worker)
	s.pending = s.client.Request("emails", "", []byte(`{"to":"cy@example.com","subject":"Reset your password"}`))
	s.delayed = s.client.Request("emails", "delay:3600", []byte(`{"to":"dee@example.com","subject":"Reminder"}`))
	if code := adminAPI(t, b, "POST", "/api/v1/queues/reports/pause", token, nil); code != 200 {
		t.Fatalf("pause reports: %d", code)
	}
	for i := range 3 {
		s.client.Request("reports", "", fmt.Appendf(nil, `{"report":"daily","day":%d}`, i+1))
	}
	var sch struct {
		ID string `json:"id"`
	}
	if code := postJSON(t, b, "/api/v1/schedules", token, `{"queue":"reports","cron":"0 3 * * *","headers":"nohaste","payload":"{\"report\":\"nightly\"}"}`, &sch); code != 200 {
		t.Fatalf("add schedule: %d", code)
	}
	s.schedule = sch.ID
	return s
}

// bury makes a dead job in queue: sent with no retries, FAILed. Jobs
// ahead of it in the queue go to the worker, which holds them.
func (s *stored) bury(t *testing.T, queue, reason string) string {
	t.Helper()
	id := s.client.Request(queue, "retry-count:0", []byte(`{"to":"zed@example.com"}`))
	for { // the worker keeps the queue's other jobs it is given
		s.worker.Ready(1)
		if bt.Expect[*emqp.Request](s.worker).MsgID == id {
			break
		}
	}
	s.worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: reason})
	bt.Eventually(t, "dead-lettered", func() bool { return s.state(t, id) == "dead" })
	return id
}

// state is a job's state by the API ("" = no such job).
func (s *stored) state(t *testing.T, msgid string) string {
	var ji admin.JobInfo
	if adminAPI(t, s.b, "GET", "/api/v1/jobs/"+msgid, s.token, &ji) != 200 {
		return ""
	}
	return ji.State
}

func (s *stored) queue(t *testing.T, name string) broker.QueueInfo {
	t.Helper()
	var qs []broker.QueueInfo
	adminAPI(t, s.b, "GET", "/api/v1/queues", s.token, &qs)
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	return broker.QueueInfo{Name: name}
}

func postJSON(t *testing.T, b *bt.Broker, path, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+b.AdminAddr()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func base(b *bt.Broker) string { return "http://" + b.AdminAddr() }

// TestPages loads every page against jobs in every state and checks what
// it shows, at 1280 and 390 px, light and dark.
func TestPages(t *testing.T) {
	s := start(t, "", "")
	tb := newTab(t, base(s.b))

	tb.open("")
	tb.until("the overview's queues", `document.querySelector('tr[data-queue="emails"]') && document.querySelector('[data-stat="Workers"] .v').textContent === '1'`)
	cells := tb.texts(`tr[data-queue="emails"] td`)
	// Queue, pending, delayed, in flight, dead, done, state, limits.
	if want := []string{"emails", "1", "1", "1", "1", "1", "running", "none"}; fmt.Sprint(cells[:8]) != fmt.Sprint(want) {
		t.Errorf("emails on the overview: %q, want %q", cells[:8], want)
	}
	cells = tb.texts(`tr[data-queue="reports"] td`)
	if cells[1] != "3" || cells[6] != "paused" {
		t.Errorf("reports on the overview: %q, want 3 pending, paused", cells)
	}
	if got := tb.texts(`[data-stat="Dead-lettered"] .v`); got[0] != "1" {
		t.Errorf("dead-lettered card: %q", got)
	}
	tb.until("the chart", `emq.chart && emq.series.length >= 1`)
	tb.shot("overview")

	tb.open("queue/emails")
	tb.until("the queue's pending jobs", sel(`document.querySelector('tr[data-msgid="%s"]') && document.querySelector('tr[data-msgid="%s"]')`+
		` && document.querySelector('#numbers [data-stat="In flight"]')`, s.pending, s.delayed))
	if got := tb.texts(`#numbers [data-stat="In flight"] .v`); got[0] != "1" {
		t.Errorf("in flight on the queue page: %q", got)
	}
	// The pending tab shows the job in flight too (the journal keeps it
	// pending), with its state.
	for id, want := range map[string]string{s.pending: "pending", s.delayed: "pending", s.inflight: "inflight"} {
		tb.until("the row of "+want, sel(`document.querySelector('tr[data-msgid="%s"]')`, id))
		if got := tb.texts(sel(`tr[data-msgid="%s"] td`, id)); got[1] != want || got[2] != "1024" {
			t.Errorf("state and priority columns of a %s job: %q, want %s and the default priority", want, got, want)
		}
	}
	tb.click(`[data-state="dead"]`)
	tb.until("the queue's dead job", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.dead))
	if got := tb.texts(sel(`tr[data-msgid="%s"] td`, s.dead)); !contains(got, "550 mailbox unavailable") {
		t.Errorf("dead row: %q", got)
	}
	tb.click(`[data-state="inflight"]`)
	tb.until("the queue's job in flight", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.inflight))
	tb.shot("queue")

	tb.open("job/" + s.done)
	tb.until("the done job's result", `document.querySelector('#result pre')`)
	if got := tb.texts(`#result pre`); !strings.Contains(got[0], `"sent":true`) {
		t.Errorf("result: %q", got)
	}
	if got := tb.texts(`#fields [data-field="State"]`); got[0] != "done" {
		t.Errorf("state: %q", got)
	}
	// Delivered once and replied: no failed attempt, beside the history's attempt 1.
	if got := tb.texts(`#fields [data-field="Failed attempts"]`); len(got) != 1 || got[0] != "0" {
		t.Errorf("failed attempts of a job done at once: %q", got)
	}
	if got := tb.texts(`table td`); !contains(got, "replied") || !contains(got, "dispatched") {
		t.Errorf("history: %q", got)
	}
	if got := eval[string](tb, `fetch(document.querySelector('#download').href).then(r => r.text())`); !strings.Contains(got, "Welcome") {
		t.Errorf("downloaded payload: %q", got)
	}
	tb.shot("job")

	// A job in flight: its worker's progress, as it comes.
	tb.open("job/" + s.inflight)
	tb.until("the job in flight", `document.querySelector('#fields [data-field="Progress"]')`)
	if got := tb.texts(`#fields [data-field="Progress"]`); got[0] != "none reported" {
		t.Errorf("progress before any report: %q", got)
	}
	s.worker.Send(&emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: s.inflight, Text: "40 resizing"})
	tb.until("the progress shown", `document.querySelector('#progress progress') && document.querySelector('#progress progress').value === 40`+
		` && document.querySelector('#progress').textContent.includes('40% resizing')`)
	s.worker.Send(&emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: s.inflight, Text: "75 sharpening"})
	tb.until("the next progress shown", `document.querySelector('#progress') && document.querySelector('#progress').textContent.includes('75% sharpening')`)
	if got := tb.texts(`[data-action="cancel"]`); len(got) != 1 {
		t.Errorf("cancel buttons on the page of a job in flight: %q, want one", got)
	}
	tb.shot("job-progress")

	tb.open("dead")
	tb.until("the dead letters", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.dead))
	if got := tb.texts(sel(`tr[data-msgid="%s"] td`, s.dead)); got[0] != "emails" || !contains(got, "550") {
		t.Errorf("dead letter row: %q", got)
	}
	tb.shot("dead")

	tb.open("workers")
	tb.until("the worker", `document.querySelector('tr[data-worker="w"]')`)
	// Worker, endpoint, queues, slots, free, in flight.
	if got := tb.texts(`tr[data-worker="w"] td`); got[2] != "emails (10), reports (5)" || got[5] != "1" {
		t.Errorf("worker row: %q", got)
	}
	tb.shot("workers")

	tb.open("schedules")
	tb.until("the schedule", sel(`document.querySelector('tr[data-schedule="%s"]')`, s.schedule))
	if got := tb.texts(sel(`tr[data-schedule="%s"] td`, s.schedule)); got[1] != "reports" || got[2] != "0 3 * * *" {
		t.Errorf("schedule row: %q", got)
	}
	tb.shot("schedules")
	tb.noErrors()

	// Narrow, dark: nothing wider than the screen but the tables, which scroll.
	tb.viewport(390, 844, "dark")
	tb.open("")
	tb.until("the narrow overview", `document.querySelector('tr[data-queue="emails"]')`)
	if w := eval[[]int](tb, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		t.Errorf("at 390 px the page is %d px wide", w[0])
	}
	if bg := eval[string](tb, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(20, 23, 28)" {
		t.Errorf("dark theme background %s", bg)
	}
	tb.shot("overview-390-dark")
	for _, page := range []struct{ route, ready string }{
		{"queue/emails", `document.querySelector('#limits') && document.querySelector('tbody tr[data-msgid]')`},
		{"job/" + s.done, `document.querySelector('#result pre')`},
		{"dead", `document.querySelector('tbody tr[data-msgid]')`},
		{"workers", `document.querySelector('tr[data-worker]')`},
		{"schedules", `document.querySelector('tr[data-schedule]')`},
	} {
		tb.open(page.route)
		tb.until("narrow "+page.route, page.ready)
		if w := eval[[]int](tb, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
			t.Errorf("at 390 px %s is %d px wide", page.route, w[0])
		}
	}
	tb.open("queue/emails")
	tb.until("the narrow queue page", `document.querySelector('#limits') && document.querySelector('tbody tr[data-msgid]')`)
	tb.shot("queue-390-dark")
	tb.viewport(1280, 900, "light")
	tb.open("")
	if bg := eval[string](tb, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(255, 255, 255)" {
		t.Errorf("light theme background %s", bg)
	}

	// The keyboard reaches the queue's controls.
	tb.open("queue/reports")
	tb.until("the controls", `document.querySelector('#pause')`)
	tb.do(chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
	reached := false
	for range 30 {
		tb.do(chromedp.KeyEvent("\t"))
		if eval[string](tb, `document.activeElement.id`) == "pause" {
			reached = true
			break
		}
	}
	if !reached {
		t.Error("Tab does not reach the pause button")
	}
	tb.noErrors()

	// A rekey (emq journal rekey) shows on the overview while it runs,
	// paced so that it runs a few seconds, and once it ended, with the
	// key the journal no longer needs.
	keys := storetest.Keys(t, "old", "new")
	for _, names := range [][]string{{"old"}, {"new", "old"}} {
		k, err := keys.With(names...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.b.ReloadJournalKeys(k); err != nil {
			t.Fatal(err)
		}
	}
	tb.open("")
	tb.until("the overview", `document.querySelector('tr[data-queue="emails"]')`)
	if got := tb.texts(`#rekey`); len(got) != 1 || got[0] != "" {
		t.Errorf("the rekey's part before any rekey: %q, want it empty", got)
	}
	if _, err := s.b.Rekey(2); err != nil {
		t.Fatal(err)
	}
	tb.until("the rekey under way", `document.querySelector('#rekey-progress') && document.querySelector('[data-rekey="State"]').textContent.startsWith('sealing again')`)
	if got := tb.texts(`[data-rekey="Key"], [data-rekey="Rate"]`); fmt.Sprint(got) != "[new at most 2 a second]" {
		t.Errorf("the rekey's key and rate: %q", got)
	}
	if p := eval[int](tb, `Number(document.querySelector('#rekey-progress').dataset.percent)`); p < 0 || p > 100 {
		t.Errorf("the rekey's percent looked at: %d", p)
	}
	tb.until("the rekey's end", `document.querySelector('[data-rekey="No longer needed"]')`)
	if got := tb.texts(`[data-rekey="State"], [data-rekey="Left"], [data-rekey="No longer needed"]`); len(got) != 3 ||
		!strings.HasPrefix(got[0], "finished") || got[1] != "0" || !strings.HasPrefix(got[2], "old (may go") {
		t.Errorf("the rekey's end: %q", got)
	}
	if got := tb.texts(`[data-rekey="Sealed again"]`); len(got) != 1 || got[0] == "0" {
		t.Errorf("values sealed again: %q", got)
	}
	tb.noErrors()
}

// TestActions changes the broker from the pages and checks the change
// through the API.
func TestActions(t *testing.T) {
	s := start(t, "", "")
	tb := newTab(t, base(s.b))

	tb.open("queue/emails")
	tb.click(`#pause`)
	bt.Eventually(t, "emails paused", func() bool { return s.queue(t, "emails").Paused })
	tb.until("the resume button", `document.querySelector('#pause').textContent === 'Resume'`)
	tb.click(`#pause`)
	bt.Eventually(t, "emails resumed", func() bool { return !s.queue(t, "emails").Paused })

	tb.fill(`#limits input[name="concurrency"]`, "20")
	tb.fill(`#limits input[name="rate"]`, "50")
	tb.fill(`#limits input[name="burst"]`, "5")
	tb.click(`#limits button[type="submit"]`)
	bt.Eventually(t, "limits set", func() bool {
		q := s.queue(t, "emails")
		return q.Concurrency == 20 && q.Rate == 50 && q.Burst == 5
	})

	// One dead job retried from its row.
	tb.click(`[data-state="dead"]`)
	tb.click(sel(`tr[data-msgid="%s"] [data-action="retry"]`, s.dead))
	bt.Eventually(t, "retried", func() bool { return s.state(t, s.dead) != "dead" })

	// Bulk: three dead jobs retried, then two deleted, as the search matched.
	s.worker.Ready(1) // the retried job comes back; the worker keeps it
	bt.Expect[*emqp.Request](s.worker)
	var dead []string
	for range 3 {
		dead = append(dead, s.bury(t, "emails", "timeout talking to smtp"))
	}
	other := s.bury(t, "emails", "bad address")
	tb.open("queue/emails")
	tb.click(`[data-state="dead"]`)
	tb.fill(`input[name="error"]`, "smtp")
	tb.click(`form[role="search"] button[type="submit"]`)
	tb.until("the search", sel(`document.querySelectorAll('tbody tr[data-msgid]').length === 3 && !document.querySelector('tr[data-msgid="%s"]')`, other))
	tb.click(`[data-bulk="retry"]`)
	tb.until("the question", `document.querySelector('[data-confirm]') && document.querySelector('.confirm').textContent.includes('Retry 3 dead jobs')`)
	tb.click(`[data-confirm]`)
	for _, id := range dead {
		bt.Eventually(t, "bulk retried", func() bool { return s.state(t, id) == "pending" })
	}
	tb.until("the retry's toast", `document.querySelector('#toast').textContent === 'Retry: 3 of 3'`)
	if s.state(t, other) != "dead" {
		t.Errorf("a dead job the search did not match was retried")
	}
	tb.click(`[data-bulk="delete"]`) // nothing matches now: says so
	tb.until("no match", `document.querySelector('#toast').textContent.includes('No jobs match')`)
	tb.fill(`input[name="error"]`, "")
	tb.click(`form[role="search"] button[type="submit"]`)
	tb.until("the other dead job", sel(`document.querySelector('tr[data-msgid="%s"]')`, other))
	tb.click(`[data-bulk="delete"]`)
	tb.click(`[data-confirm]`)
	bt.Eventually(t, "bulk deleted", func() bool { return s.state(t, other) == "" })

	// A pending job deleted from its page.
	tb.open("job/" + s.pending)
	tb.click(`[data-action="delete"]`)
	tb.click(`[data-confirm]`)
	bt.Eventually(t, "deleted", func() bool { return s.state(t, s.pending) == "" })
	tb.until("back on the queue page", `location.hash === '#/queue/emails'`)

	// A pending job cancelled from its page, which shows its priority and
	// unique key, then the job cancelled (the broker keeps done jobs: it
	// keeps cancelled ones too).
	urgent := s.client.Request("emails", "priority:5,unique:welcome-ann", []byte(`{"to":"ann@example.com"}`))
	tb.open("job/" + urgent)
	tb.until("the job's fields", `document.querySelector('#fields [data-field="Unique key"]')`)
	if got := tb.texts(`#fields [data-field="Priority"], #fields [data-field="Unique key"]`); fmt.Sprint(got) != "[5 welcome-ann]" {
		t.Errorf("priority and unique key: %q", got)
	}
	tb.click(`[data-action="cancel"]`)
	tb.until("the question", `document.querySelector('.confirm') && document.querySelector('.confirm').textContent.includes('Cancel this job?')`)
	tb.click(`[data-confirm]`)
	bt.Eventually(t, "cancelled", func() bool { return s.state(t, urgent) == "cancelled" })
	tb.until("the page shows it cancelled", `document.querySelector('#fields [data-field="State"]').textContent === 'cancelled'`+
		` && !document.querySelector('[data-action="cancel"]') && document.body.textContent.includes('cancelled by admin')`)
	tb.open("queue/emails")
	tb.click(`[data-state="cancelled"]`)
	tb.until("the cancelled tab", sel(`document.querySelector('tr[data-msgid="%s"]')`, urgent))
	if got := tb.texts(sel(`tr[data-msgid="%s"] td`, urgent)); got[1] != "cancelled" || got[2] != "5" {
		t.Errorf("the cancelled job's row: %q", got)
	}

	// Bulk: the pending jobs a search matches cancelled; the others stay.
	batch := []string{s.client.Request("emails", "batch:1", nil), s.client.Request("emails", "batch:1", nil)}
	tb.click(`[data-state="pending"]`)
	tb.fill(`input[name="header"]`, "batch")
	tb.click(`form[role="search"] button[type="submit"]`)
	tb.until("the search", `document.querySelectorAll('tbody tr[data-msgid]').length === 2`)
	tb.click(`[data-bulk="cancel"]`)
	tb.until("the bulk question", `document.querySelector('.confirm') && document.querySelector('.confirm').textContent.includes('Cancel 2 pending jobs')`)
	tb.click(`[data-confirm]`)
	for _, id := range batch {
		bt.Eventually(t, "bulk cancelled", func() bool { return s.state(t, id) == "cancelled" })
	}
	tb.until("the bulk cancel's toast", `document.querySelector('#toast').textContent === 'Cancel: 2 of 2'`)
	if st := s.state(t, s.delayed); st != "pending" {
		t.Errorf("a job the search did not match is %s", st)
	}

	// A dead job retried and one deleted from the dead letters page.
	d1, d2 := s.bury(t, "emails", "x"), s.bury(t, "emails", "y")
	tb.open("dead")
	tb.click(sel(`tr[data-msgid="%s"] [data-action="retry"]`, d1))
	bt.Eventually(t, "retried from dead letters", func() bool { return s.state(t, d1) == "pending" })
	tb.until("the list without it", sel(`!document.querySelector('tr[data-msgid="%s"]')`, d1))
	tb.click(sel(`tr[data-msgid="%s"] [data-action="delete"]`, d2))
	tb.click(`[data-confirm]`)
	bt.Eventually(t, "deleted from dead letters", func() bool { return s.state(t, d2) == "" })

	// The schedule paused, resumed, removed.
	tb.open("schedules")
	tb.click(sel(`tr[data-schedule="%s"] [data-action="pause"]`, s.schedule))
	bt.Eventually(t, "schedule paused", func() bool { return s.schedulePaused(t) == 1 })
	tb.click(sel(`tr[data-schedule="%s"] [data-action="resume"]`, s.schedule))
	bt.Eventually(t, "schedule resumed", func() bool { return s.schedulePaused(t) == 0 })
	tb.click(sel(`tr[data-schedule="%s"] [data-action="remove"]`, s.schedule))
	tb.click(`[data-confirm]`)
	bt.Eventually(t, "schedule removed", func() bool { return s.schedulePaused(t) == -1 })

	// The job in flight cancelled from its page: its worker is told.
	tb.open("job/" + s.inflight)
	tb.click(`[data-action="cancel"]`)
	tb.until("the question", `document.querySelector('.confirm') && document.querySelector('.confirm').textContent.includes('Its worker is told to stop')`)
	tb.click(`[data-confirm]`)
	if c := bt.Expect[*emqp.Cancel](s.worker); c.OrigMsgID != s.inflight {
		t.Errorf("the worker was told to cancel %s, want %s", c.OrigMsgID, s.inflight)
	}
	tb.until("the page shows it cancelled", `document.querySelector('#fields [data-field="State"]').textContent === 'cancelled'`)
	tb.noErrors()
}

// schedulePaused is 1 when the schedule is paused, 0 when not, -1 gone.
func (s *stored) schedulePaused(t *testing.T) int {
	var si admin.ScheduleInfo
	switch adminAPI(t, s.b, "GET", "/api/v1/schedules/"+s.schedule, s.token, &si) {
	case 200:
		if si.Paused {
			return 1
		}
		return 0
	case 404:
		return -1
	}
	t.Fatal("schedule: unexpected status")
	return 0
}

// TestLogin: with a token the pages want a login; the session cookie is
// HttpOnly and SameSite=Strict; another site's page cannot change
// anything with it; logging out ends it.
func TestLogin(t *testing.T) {
	const token = "s3cret-full-token"
	s := start(t, token, "r3ad-only-token")
	tb := newTab(t, base(s.b))

	tb.open("")
	tb.until("the login page", `document.querySelector('#token')`)
	if eval[int](tb, `fetch('/api/v1/queues').then(r => r.status)`) != 401 {
		t.Error("the API answers without a login")
	}
	tb.do(chromedp.SendKeys(`#token`, "wrong"), chromedp.Click(`#login`))
	tb.until("refused", `document.querySelector('#login-error').textContent.includes('wrong token')`)
	tb.takeErrors() // the browser logs the two 401s
	tb.fill(`#token`, token)
	tb.click(`#login`)
	tb.until("the overview", `document.querySelector('tr[data-queue="emails"]')`)
	tb.shot("login-overview")

	cookies, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base(s.b)}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == admin.SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict", session)
	}
	if eval[bool](tb, `document.cookie.includes('emq_session')`) {
		t.Error("the page's scripts can read the session cookie")
	}

	// Another site's page, logged in: a form posted to the admin API, and
	// a fetch with the admin header. Neither pauses the queue.
	evil := evilSite(t, base(s.b))
	tb.do(chromedp.Navigate(evil))
	tb.until("the other site's attempts", `document.title === 'tried'`)
	tb.takeErrors() // the refused fetch is logged
	if s.queue(t, "emails").Paused {
		t.Fatal("another site's page paused a queue")
	}

	tb.open("")
	tb.until("the overview again", `document.querySelector('#logout') && !document.querySelector('#logout').hidden`)
	tb.click(`#logout`)
	tb.until("the login page after logout", `document.querySelector('#token')`)
	if eval[int](tb, `fetch('/api/v1/queues').then(r => r.status)`) != 401 {
		t.Error("the API still answers after logout")
	}
	tb.takeErrors()
	// The old cookie is dead on the server too.
	req, _ := http.NewRequest("GET", base(s.b)+"/api/v1/queues", nil)
	req.AddCookie(&http.Cookie{Name: admin.SessionCookie, Value: session.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("the logged-out session: %d, want 401", resp.StatusCode)
	}
}

// evilSite serves, on another loopback port, a page that tries to pause
// queue emails through admin: a form posted into a frame, and a fetch
// with credentials and the admin header. It titles itself "tried".
func evilSite(t *testing.T, admin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := admin + "/api/v1/queues/emails/pause"
	page := `<!doctype html><title>evil</title>
<iframe name="f"></iframe>
<form id="f" method="POST" action="` + target + `" target="f"><input name="x" value="1"></form>
<script>
let n = 0;
const done = () => { if (++n === 2) document.title = 'tried'; };
document.querySelector('iframe').addEventListener('load', done);
document.getElementById('f').submit();
fetch(` + "`" + target + "`" + `, {method: 'POST', credentials: 'include', headers: {'X-EMQ-Admin': '1'}}).then(done, done);
</script>`
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// TestReadOnly: the read-only token sees every page with no button that
// changes anything, and a change it forges is refused.
func TestReadOnly(t *testing.T) {
	const token = "s3cret-full-token"
	s := start(t, token, "r3ad-only-token")
	tb := newTab(t, base(s.b))
	tb.open("")
	tb.until("the login page", `document.querySelector('#token')`)
	tb.fill(`#token`, "r3ad-only-token")
	tb.click(`#login`)
	tb.until("the overview", `document.querySelector('tr[data-queue="emails"]')`)
	if got := tb.texts(`#who`); got[0] != "read-only" {
		t.Errorf("who: %q", got)
	}
	changes := `document.querySelectorAll('#pause, #limits, [data-action], [data-bulk], [data-confirm]').length`
	for _, page := range []struct{ route, ready string }{
		{"queue/emails", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.pending)},
		{"job/" + s.dead, `document.querySelector('#fields')`},
		{"dead", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.dead)},
		{"schedules", sel(`document.querySelector('tr[data-schedule="%s"]')`, s.schedule)},
		{"workers", `document.querySelector('tr[data-worker="w"]')`},
	} {
		tb.open(page.route)
		tb.until(page.route, page.ready)
		if n := eval[int](tb, changes); n != 0 {
			t.Errorf("%s: %d elements that change something, for the read-only token", page.route, n)
		}
	}
	tb.open("queue/emails")
	tb.click(`[data-state="dead"]`)
	tb.until("dead tab", sel(`document.querySelector('tr[data-msgid="%s"]')`, s.dead))
	if n := eval[int](tb, changes); n != 0 {
		t.Errorf("dead tab: %d elements that change something", n)
	}
	// Payloads and results are hidden from it: their sizes show, not
	// them (docs/security.md, Who sees payloads).
	body := `document.body.innerText`
	if text := eval[string](tb, body); strings.Contains(text, "@example.com") ||
		eval[int](tb, `document.querySelectorAll('td.payload-hidden').length`) == 0 {
		t.Errorf("queue page: payloads not said hidden to the read-only token: %q", text)
	}
	tb.open("job/" + s.done)
	tb.until("the done job's page", `document.querySelector('#payload-hidden')`)
	if got := tb.texts(`#payload-hidden`); !strings.HasPrefix(got[0], "Payload hidden (size 44 B)") {
		t.Errorf("payload: %q, want its size and that it is hidden", got)
	}
	if got := tb.texts(`#result`); got[0] != "Result hidden." {
		t.Errorf("result: %q", got)
	}
	if text := eval[string](tb, body); strings.Contains(text, "@example.com") || strings.Contains(text, "m-1") ||
		eval[int](tb, `document.querySelectorAll('#preview, #download').length`) != 0 {
		t.Errorf("job page shows the payload or result to the read-only token: %q", text)
	}
	tb.noErrors()
	// Forged: the page's own origin, the admin header, the session cookie.
	status := eval[int](tb, `fetch('/api/v1/queues/emails/pause', {method: 'POST', headers: {'X-EMQ-Admin': '1'}}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("forged pause with the read-only session: %d, want 403", status)
	}
	if s.queue(t, "emails").Paused {
		t.Error("the read-only session paused a queue")
	}
	tb.takeErrors()
}

// The overview shows its numbers with the page, not only once the
// overview stream has sent its first: here the stream never does.
func TestOverviewFirstNumbers(t *testing.T) {
	s := start(t, "", "")
	tb := newTab(t, base(s.b))
	silent := `window.EventSource = class { constructor() { this.readyState = 0; } addEventListener() {} close() {} };` +
		`window.EventSource.CLOSED = 2;`
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: silent}); err != nil {
		t.Fatal(err)
	}
	tb.open("")
	tb.until("the overview's numbers, without the stream", `document.querySelector('tr[data-queue="emails"]') && document.querySelector('[data-stat="Workers"] .v')`)
	if got := tb.texts(`[data-stat="Workers"] .v, [data-stat="Dead-lettered"] .v`); fmt.Sprint(got) != "[1 1]" {
		t.Errorf("workers and dead-lettered cards: %q, want [1 1]", got)
	}
}

// TestChartMoves: while jobs flow, the overview's chart and numbers move
// without a reload.
func TestChartMoves(t *testing.T) {
	s := start(t, "", "")
	tb := newTab(t, base(s.b))
	tb.open("")
	tb.until("the overview", `document.querySelector('tr[data-queue="emails"]') && emq.chart`)
	before := tb.texts(`[data-stat="Acknowledged"] .v`)[0]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := worker.New(worker.Options{Broker: s.b.Backend(), Concurrency: 4, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("flow", func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	ran := make(chan struct{})
	go func() { _ = w.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }() // its logger is the test's
	c, err := client.New(client.Options{Broker: s.b.Frontend()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for ctx.Err() == nil {
			if _, err := c.Send(ctx, "flow", []byte("tick")); err != nil && !errors.Is(err, context.Canceled) {
				return
			}
		}
	}()
	defer func() { cancel(); <-sent }()
	tb.until("the chart moves", `emq.chart.data.datasets[1].data.some(v => v > 0) && emq.chart.data.datasets[2].data.some(v => v > 0)`)
	tb.until("the flow queue's rate", `document.querySelector('tr[data-queue="flow"]') && document.querySelector('tr[data-queue="flow"] td:nth-child(11)').textContent !== '0'`)
	if after := tb.texts(`[data-stat="Acknowledged"] .v`)[0]; after == before {
		t.Errorf("acknowledged card still %s", after)
	}
	if os.Getenv("EMQ_UI_SCREENSHOTS") != "" { // a picture with a line: a few seconds of it
		tb.until("a few seconds of the chart", `emq.series.length >= 8`)
	}
	tb.shot("overview-live")
	tb.noErrors()
}
