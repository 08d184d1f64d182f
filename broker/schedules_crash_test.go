package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// clockEnv names a file whose time is a child broker's schedules' clock
// (Options.Now): the test moves it, the child follows.
const clockEnv = "EMQ_TEST_CLOCK"

// fileClock is the time in a file.
type fileClock struct {
	path string
	mu   sync.Mutex
	now  time.Time
}

func newFileClock(t *testing.T, now time.Time) *fileClock {
	c := &fileClock{path: filepath.Join(t.TempDir(), "clock")}
	c.set(t, now)
	return c
}

// set writes now to the file (whole, by rename).
func (c *fileClock) set(t *testing.T, now time.Time) {
	t.Helper()
	tmp := c.path + ".new"
	if err := os.WriteFile(tmp, []byte(now.Format(time.RFC3339Nano)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		t.Fatal(err)
	}
}

// childClock is the child's side: the clock as the file says when the
// child starts.
func childClock(path string) (*fileClock, error) {
	c := &fileClock{path: path}
	now, err := c.read()
	c.now = now
	return c, err
}

func (c *fileClock) read() (time.Time, error) {
	text, err := os.ReadFile(c.path)
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, string(text))
}

func (c *fileClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// follow moves the clock when the file changes, and makes b plan by it,
// until the process ends.
func (c *fileClock) follow(b *broker.Broker) {
	tick := time.NewTicker(2 * time.Millisecond)
	for range tick.C {
		now, err := c.read()
		if err != nil || now.Equal(c.Now()) {
			continue
		}
		c.mu.Lock()
		c.now = now
		c.mu.Unlock()
		broker.Replan(b)
	}
}

// fireWorker takes a broker's jobs of queue ticks, replies to each and
// counts the deliveries of each msgid.
type fireWorker struct {
	mu   sync.Mutex
	seen map[string]int
}

// serve works for the broker at backend until its connection ends (the
// returned channel closes then).
func (w *fireWorker) serve(t *testing.T, backend string) <-chan struct{} {
	p := dialRaw(t, backend, "fire-worker")
	p.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "ticks"}}})
	for range 64 {
		p.send(&emqp.Ready{MsgID: emqp.NewID()})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		beat := time.NewTicker(time.Second)
		defer beat.Stop()
		for {
			select {
			case m, ok := <-p.in:
				if !ok {
					return
				}
				if r, ok := m.(*emqp.Request); ok {
					w.mu.Lock()
					w.seen[r.MsgID]++
					w.mu.Unlock()
					p.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
					p.send(&emqp.Ready{MsgID: emqp.NewID()})
				}
			case <-beat.C:
				p.send(&emqp.Heartbeat{MsgID: emqp.NewID(), Time: fmt.Sprint(time.Now().Unix())})
			}
		}
	}()
	return done
}

// got counts how many of ids were delivered.
func (w *fireWorker) got(ids []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, id := range ids {
		if w.seen[id] > 0 {
			n++
		}
	}
	return n
}

// The broker as a child process, on a clock the test moves a due time at a
// time, SIGKILLed right after the clock moved, after the first of a due
// time's fires arrived (while the others are being made), and after all
// of them (between fires): every due time fires once, no more. Then an
// outage of ten due times: one catch-up fire per schedule, none with
// misfire:skip. The journal's fire counts agree with the msgids seen.
func TestScheduleFiresOnceAcrossCrashes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	const every = time.Minute
	clk := newFileClock(t, t0)
	w := &fireWorker{seen: map[string]int{}}
	var c *child
	var served <-chan struct{}
	start := func() {
		c = startChild(t, dir, frontend, backend, clockEnv+"="+clk.path)
		served = w.serve(t, backend)
	}
	kill := func() {
		c.kill()
		testutil.Recv(t, served, "the worker's end, its connection closed by the kill")
	}
	start()

	ids := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "k0", "k1"} // k: misfire:skip
	client := dialRaw(t, frontend, "schedule-client")
	for _, id := range ids {
		h := "schedule-id:" + id
		if id[0] == 'k' {
			h += ",misfire:skip"
		}
		headers, _ := emqp.ParseHeaders(h)
		msgid := emqp.NewID()
		client.send(&emqp.Schedule{MsgID: msgid, Queue: "ticks", Headers: headers, Interval: int(every / time.Second), Payload: []byte(id)})
		if a, ok := testutil.Recv(t, client.in, "the SCHEDULE's ACK").(*emqp.Ack); !ok || a.AckedID != msgid {
			t.Fatalf("SCHEDULE %s: got %+v, want its ACK", id, a)
		}
	}

	var expected []string
	perSchedule := map[string]int{}
	fires := func(due time.Time, which func(id string) bool) []string {
		var out []string
		for _, id := range ids {
			if which(id) {
				out = append(out, broker.FireID(id, due))
				perSchedule[id]++
			}
		}
		expected = append(expected, out...)
		return out
	}
	all := func(string) bool { return true }
	arrived := func(want []string, n int) func() bool {
		return func() bool { return w.got(want) >= n }
	}

	const steps = 13
	kills := map[string]int{}
	for k := range steps {
		due := t0.Add(time.Duration(k) * every)
		want := fires(due, all)
		if k > 0 {
			clk.set(t, due)
		}
		switch k % 4 {
		case 1: // right after the clock moved
			kill()
			kills["at the due time"]++
			start()
		case 2: // while the due time's fires are being made
			bt.Eventually(t, "a first fire", arrived(want, 1))
			kill()
			kills["during the fires"]++
			start()
		case 3: // between fires
			bt.Eventually(t, "the fires of "+due.String(), arrived(want, len(want)))
			kill()
			kills["between fires"]++
			start()
		}
		bt.Eventually(t, "the fires of "+due.String(), arrived(want, len(want)))
	}

	// Ten due times pass while no broker runs.
	last := t0.Add((steps - 1) * every)
	kill()
	clk.set(t, last.Add(10*every+30*time.Second))
	start()
	catchUp := fires(last.Add(every), func(id string) bool { return id[0] == 's' })
	bt.Eventually(t, "the catch-up fires", arrived(catchUp, len(catchUp)))
	next := fires(last.Add(11*every), all)
	clk.set(t, last.Add(11*every))
	bt.Eventually(t, "the fires after the outage", arrived(next, len(next)))

	// Stop, and count in the journal: every fire made is one the worker
	// got, or one still pending; no other.
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("the child broker's stop: %v", err)
	}
	testutil.Recv(t, served, "the worker's end, its connection closed by the stop")
	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	made := map[string]bool{}
	w.mu.Lock()
	duplicates := 0
	for id, n := range w.seen {
		made[id] = true
		duplicates += n - 1
	}
	w.mu.Unlock()
	if err := j.Load(func(sj *store.Job) error { made[sj.MsgID] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	var got []string
	for id := range made {
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(expected)
	if !slices.Equal(got, expected) {
		t.Fatalf("fires made:\n%v\nwant one per due time:\n%v", got, expected)
	}
	err = j.LoadSchedules(func(s *store.Schedule) error {
		if s.Fires != perSchedule[s.ID] {
			t.Errorf("schedule %s: the journal counts %d fires, want %d", s.ID, s.Fires, perSchedule[s.ID])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d fires of %d schedules over %d due times and an outage; kills %v; %d deliveries again (in flight at a kill)",
		len(expected), len(ids), steps, kills, duplicates)
	suite.add("schedule fires across kills, each once", len(expected))
}
