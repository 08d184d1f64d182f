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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/netlab"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/worker"
)

// groupBroker is one `emq broker --etcd-endpoints` child process.
type groupBroker struct {
	t                        testing.TB
	name                     string
	args                     []string
	frontend, backend, admin string
	token                    string                                      // the admin token, if one is set
	command                  func(name string, args ...string) *exec.Cmd // exec.Command, or a namespace's
	env                      []string                                    // more of the child's environment
	node                     *netlab.Node                                // its namespace, if in a lab
	clock                    string                                      // the file of its schedules' clock, if in a lab
	cmd                      *exec.Cmd
	logs                     *testutil.Buffer
	mu                       sync.Mutex
}

func newGroupBroker(t testing.TB, etcd []string, name string, args ...string) *groupBroker {
	g := makeGroupBroker(t, etcd, name, args...)
	g.start()
	return g
}

// makeGroupBroker is newGroupBroker without the start: its endpoints
// are known, and start runs it.
func makeGroupBroker(t testing.TB, etcd []string, name string, args ...string) *groupBroker {
	g := &groupBroker{t: t, name: name, frontend: bt.FreeEndpoint(t), backend: bt.FreeEndpoint(t),
		admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), command: exec.Command}
	g.setArgs(etcd, args...)
	t.Cleanup(g.kill)
	return g
}

// setArgs makes the broker's command line from its endpoints and args.
func (g *groupBroker) setArgs(etcd []string, args ...string) {
	name := g.name
	g.args = []string{"broker", "--etcd-endpoints", strings.Join(etcd, ","), "--etcd-name", name,
		"--frontend", g.frontend, "--backend", g.backend, "--admin", g.admin,
		"--publisher-incoming", "", "--publisher-outgoing", "",
		"--heartbeat-interval", "100ms", "--heartbeat-timeout", "1s", "--log-level", "warn"}
	g.args = append(g.args, args...)
	if i := slices.Index(args, "--admin-token"); i >= 0 {
		g.token = args[i+1]
	}
}

func (g *groupBroker) start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	cmd := g.command(os.Args[0], g.args...)
	cmd.Env = bt.ChildEnv(append([]string{mainEnv + "=1"}, g.env...)...)
	g.logs = new(testutil.Buffer)
	cmd.Stderr = g.logs
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.cmd = cmd
}

// kill sends SIGKILL and reaps the process.
func (g *groupBroker) kill() {
	g.mu.Lock()
	cmd := g.cmd
	g.cmd = nil
	g.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// stop sends SIGTERM and waits for the process to exit.
func (g *groupBroker) stop() error {
	g.mu.Lock()
	cmd := g.cmd
	g.cmd = nil
	g.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bt.Wait):
		cmd.Process.Kill()
		return errors.New("did not stop within 10 s of SIGTERM")
	}
}

func (g *groupBroker) log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// get asks the admin listener for path, with the token if one is set.
func (g *groupBroker) get(path string) (*http.Response, error) {
	req, err := http.NewRequest("GET", "http://"+g.admin+path, nil)
	if err != nil {
		return nil, err
	}
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	return http.DefaultClient.Do(req)
}

// ready reports whether /readyz says 200 (it leads and serves).
func (g *groupBroker) ready() bool {
	resp, err := g.get("/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metric returns the line of /metrics that starts with name.
func (g *groupBroker) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := g.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, name) {
			return line
		}
	}
	return ""
}

// group reads the stats API's "group"; nil when it does not answer.
func (g *groupBroker) group() *admin.GroupInfo {
	resp, err := g.get("/api/v1/stats")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var si admin.StatsInfo
	if json.NewDecoder(resp.Body).Decode(&si) != nil {
		return nil
	}
	return si.Group
}

// leaderOf waits for one of bs to lead and serve, the others to be
// standbys that say so.
func leaderOf(t testing.TB, bs ...*groupBroker) *groupBroker {
	t.Helper()
	var leader *groupBroker
	bt.Eventually(t, "one broker leading, the others standing by", func() bool {
		leader = nil
		for _, b := range bs {
			info := b.group()
			switch {
			case info == nil:
				return false
			case info.Role == group.RoleLeader && b.ready():
				if leader != nil {
					return false
				}
				leader = b
			case info.Role != group.RoleStandby || b.ready():
				return false
			}
		}
		return leader != nil
	})
	return leader
}

// load is senders and a worker on every broker of a group: it records
// what was ACKed and what ran.
type load struct {
	mu      sync.Mutex
	acked   []string
	ackedAt []time.Time
	ran     map[string]int
	sendErr error
	cancel  context.CancelFunc // the senders'
	stopW   context.CancelFunc // the worker's
	sending sync.WaitGroup
	working sync.WaitGroup
	ranFile string // of a worker process: the msgids it ran, a line each
}

func startLoad(t *testing.T, senders int, bs ...*groupBroker) *load {
	var fronts, backs []string
	for _, b := range bs {
		fronts, backs = append(fronts, b.frontend), append(backs, b.backend)
	}
	return startLoadAt(t, senders, "q", fronts, backs)
}

// startLoadAt is startLoad on queue, with the senders given fronts and
// the worker backs.
func startLoadAt(t *testing.T, senders int, queue string, fronts, backs []string) *load {
	return startLoadWith(t, senders, queue, fronts, backs, false)
}

// startLoadWith is startLoadAt; asCLI gives the senders and the worker
// the libraries' defaults, as emq send and emq worker run them
// (heartbeats every 1 s, a broker left after 3 s of silence, a REQUEST
// resent after 5 s), instead of the quicker settings of the other tests.
func startLoadWith(t *testing.T, senders int, queue string, fronts, backs []string, asCLI bool) *load {
	l := &load{ran: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	wctx, wcancel := context.WithCancel(context.Background())
	l.cancel, l.stopW = cancel, wcancel
	wopts := worker.Options{Broker: strings.Join(backs, ","), Concurrency: 16, Logger: bt.Logger(t),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second}
	copts := client.Options{Broker: strings.Join(fronts, ","), ResendAfter: 500 * time.Millisecond, Logger: bt.Logger(t)}
	if asCLI {
		wopts.HeartbeatInterval, wopts.HeartbeatTimeout, copts.ResendAfter = 0, 0, 0
	}
	w, err := worker.New(wopts)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(queue, func(_ context.Context, j *worker.Job) ([]byte, error) {
		l.mu.Lock()
		l.ran[j.MsgID]++
		l.mu.Unlock()
		return nil, nil
	})
	l.working.Add(1)
	go func() { defer l.working.Done(); w.Run(wctx) }()
	for range senders {
		c, err := client.New(copts)
		if err != nil {
			t.Fatal(err)
		}
		l.sending.Add(1)
		go func() {
			defer l.sending.Done()
			defer c.Close()
			for ctx.Err() == nil {
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				id, err := c.Send(sctx, queue, []byte("payload"))
				scancel()
				l.mu.Lock()
				switch {
				case err == nil:
					l.acked = append(l.acked, id)
					l.ackedAt = append(l.ackedAt, time.Now())
				case ctx.Err() == nil && l.sendErr == nil:
					l.sendErr = err
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { l.stop(); l.stopW(); l.working.Wait() })
	return l
}

// startCLILoad is startLoadAt with the commands: senders that each
// run `emq send` again and again (a new process, so a new connection,
// for each job), and an `emq worker --exec` that writes each msgid it
// runs to a file; all with the commands' defaults.
func startCLILoad(t *testing.T, senders int, queue string, fronts, backs []string) *load {
	l := &load{ran: map[string]int{}, ranFile: filepath.Join(t.TempDir(), "ran")}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	w := exec.Command(os.Args[0], "worker", "--broker", strings.Join(backs, ","), "--queues", queue,
		"--concurrency", "4", "--grace", "2s", "--exec", `echo "$EMQ_MSGID" >>`+l.ranFile)
	w.Env = bt.ChildEnv(mainEnv + "=1")
	wlogs := new(testutil.Buffer)
	w.Stderr = wlogs
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	l.working.Add(1)
	wdone := make(chan struct{})
	go func() { defer l.working.Done(); w.Wait(); close(wdone) }()
	l.stopW = func() {
		w.Process.Signal(syscall.SIGTERM)
		select {
		case <-wdone:
		case <-time.After(bt.Wait):
			w.Process.Kill()
		}
	}
	for range senders {
		l.sending.Add(1)
		go func() {
			defer l.sending.Done()
			for ctx.Err() == nil {
				cmd := exec.Command(os.Args[0], "send", "--broker", strings.Join(fronts, ","), "--queue", queue, "payload")
				cmd.Env = bt.ChildEnv(mainEnv + "=1")
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				l.mu.Lock()
				switch id := strings.TrimSpace(out.String()); {
				case err == nil && id != "":
					l.acked = append(l.acked, id)
					l.ackedAt = append(l.ackedAt, time.Now())
				case l.sendErr == nil:
					l.sendErr = fmt.Errorf("emq send: %v: %s", err, errOut.String())
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		l.stop()
		l.stopW()
		l.working.Wait()
		if t.Failed() {
			t.Logf("emq worker:\n%s", wlogs.String())
		}
	})
	return l
}

// readRan takes what a worker process ran from its file (l.mu held).
func (l *load) readRan() {
	if l.ranFile == "" {
		return
	}
	b, err := os.ReadFile(l.ranFile)
	if err != nil {
		return // nothing ran yet
	}
	clear(l.ran)
	for id := range strings.Lines(string(b)) {
		if id = strings.TrimSpace(id); id != "" {
			l.ran[id]++
		}
	}
}

// stop stops the senders; the worker runs on (check stops it).
func (l *load) stop() { l.cancel(); l.sending.Wait() }

func (l *load) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// firstAckAfter is when the first ACK after t came; zero when none yet.
func (l *load) firstAckAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.ackedAt {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// tally is what a load's worker saw of the jobs its senders had ACKed.
type tally struct {
	acked int // jobs ACKed to the senders
	ran   int // of those, how many the worker ran (at least once)
	lost  int // ACKed, never run
	again int // runs beyond the first, of any job
}

// check waits until every ACKed job ran, or for bt.Wait after the last
// run seen, and counts from what the worker ran; a job ACKed and never
// run fails the test. It stops the worker.
func (l *load) check(t *testing.T) tally {
	t.Helper()
	unrun := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.readRan()
		n := 0
		for _, id := range l.acked {
			if l.ran[id] == 0 {
				n++
			}
		}
		return n
	}
	for left, since := unrun(), time.Now(); left > 0 && time.Since(since) < bt.Wait; {
		<-time.After(10 * time.Millisecond) // polling the worker's count, with a deadline
		if n := unrun(); n < left {
			left, since = n, time.Now()
		}
	}
	l.stopW()
	l.working.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readRan()
	if l.sendErr != nil {
		t.Errorf("a Send returned an error: %v", l.sendErr)
	}
	var tl tally
	var lost []string
	for _, id := range l.acked {
		if l.ran[id] > 0 {
			tl.ran++
		} else {
			lost = append(lost, id)
		}
	}
	for _, n := range l.ran {
		tl.again += n - 1
	}
	tl.acked, tl.lost = len(l.acked), len(lost)
	if len(lost) > 0 {
		t.Errorf("%d of %d ACKed jobs never ran, among them %v", len(lost), tl.acked, lost[:min(len(lost), 5)])
	}
	return tl
}

// waitAcks waits until n more jobs are ACKed.
func (l *load) waitAcks(t *testing.T, n int, what string) {
	t.Helper()
	from := l.ackedCount()
	bt.Eventually(t, what, func() bool { return l.ackedCount() >= from+n })
}

// TestGroupLeaderKilledUnderLoad: two brokers on a 3-member etcd, jobs
// flowing; the leader is SIGKILLed and started again, round after round.
// The standby takes over, senders and the worker follow with no error,
// and every ACKed job runs. EMQ_GROUP_ROUNDS sets the rounds (make
// torture: 100).
func TestGroupLeaderKilledUnderLoad(t *testing.T) {
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("EMQ_GROUP_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leaderOf(t, a, b)
	l := startLoad(t, 8, a, b)
	var took []time.Duration
	for round := range rounds {
		l.waitAcks(t, 50, fmt.Sprintf("round %d: jobs ACKed", round))
		leader := leaderOf(t, a, b)
		killed := time.Now()
		leader.kill()
		var at time.Time
		bt.Eventually(t, fmt.Sprintf("round %d: an ACK from the new leader", round), func() bool {
			at = l.firstAckAfter(killed)
			return !at.IsZero()
		})
		took = append(took, at.Sub(killed))
		leader.start()
		leaderOf(t, a, b)
	}
	l.waitAcks(t, 50, "jobs ACKed after the last round")
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	slices.Sort(took)
	t.Logf("%d rounds: %d jobs ACKed, every one ran; %d runs beyond the first; failover (SIGKILL to the next ACK) p50 %v, max %v",
		rounds, acked, again, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	for _, g := range []*groupBroker{a, b} { // each took over from the copy it kept as a standby
		if strings.Contains(g.log(), "taking over without the standby's copy") {
			t.Errorf("broker %s took over without its copy of the journal", g.name)
		}
	}
	if t.Failed() {
		t.Logf("broker a:\n%s\nbroker b:\n%s", a.log(), b.log())
	}
}

// TestGroupLeaderPausedUnderLoad: two brokers on a 3-member etcd, jobs
// flowing, the leader SIGSTOPped for three lease TTLs (6 s), then
// SIGCONT, round after round. Two loads at once, each given both
// brokers: the libraries' senders and worker with their defaults, and
// the commands themselves (`emq send` run again and again, `emq worker
// --exec`). Checked: every ACKed job runs (as the worker saw it), and at
// no sample are both brokers ready. Measured, for docs/benchmarks.md:
// each load's longest gap between ACKs from the pause on (the target is
// the TTL + 1 s). EMQ_PAUSE_ROUNDS sets the rounds (default 2).
func TestGroupLeaderPausedUnderLoad(t *testing.T) {
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("EMQ_PAUSE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leaderOf(t, a, b)
	both := sampleReady(a, b)
	fronts, backs := []string{a.frontend, b.frontend}, []string{a.backend, b.backend}
	loads := []struct {
		name string
		l    *load
		gaps []string
	}{
		{name: "libraries", l: startLoadWith(t, 4, "q", fronts, backs, true)},
		{name: "commands", l: startCLILoad(t, 4, "cli", fronts, backs)},
	}
	for round := range rounds {
		for _, ld := range loads {
			ld.l.waitAcks(t, 20, fmt.Sprintf("round %d: jobs ACKed to the %s", round, ld.name))
		}
		leader := leaderOf(t, a, b)
		paused := time.Now()
		leader.signal(syscall.SIGSTOP)
		<-time.After(3 * ttl) // the pause's length, not a wait for something
		leader.signal(syscall.SIGCONT)
		leaderOf(t, a, b)
		for i, ld := range loads {
			ld.l.waitAcks(t, 20, fmt.Sprintf("round %d: jobs ACKed to the %s after the pause", round, ld.name))
			gap, from := ld.l.longestGap(paused, time.Now())
			t.Logf("round %d, %s: longest gap between ACKs %v, from %v after the SIGSTOP",
				round, ld.name, gap.Round(time.Millisecond), from.Sub(paused).Round(time.Millisecond))
			loads[i].gaps = append(ld.gaps, gap.Round(10*time.Millisecond).String())
		}
	}
	for _, ld := range loads {
		ld.l.stop()
	}
	for _, ld := range loads {
		tl := ld.l.check(t)
		t.Logf("%s, %d rounds of a 6 s pause: %d jobs ACKed, %d ran, %d lost, %d runs beyond the first; longest gaps between ACKs %s",
			ld.name, rounds, tl.acked, tl.ran, tl.lost, tl.again, strings.Join(ld.gaps, ", "))
	}
	if n := both(); n > 0 {
		t.Errorf("%d samples with both brokers ready", n)
	}
	if t.Failed() {
		t.Logf("broker a:\n%s\nbroker b:\n%s", a.log(), b.log())
	}
}

// TestGroupLeaderFencedWhenItsLeaseEnds: the leader's lease is revoked
// (as when it is cut off from etcd for longer than its TTL). It stops
// serving, the standby takes over, and the old leader stands by.
func TestGroupLeaderFencedWhenItsLeaseEnds(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	old := leaderOf(t, a, b)
	l := startLoad(t, 4, a, b)
	l.waitAcks(t, 50, "jobs ACKed")

	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	resp, err := cli.Get(ctx, group.LeaderPrefix("/emq/"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("leader key: %v %v", resp, err)
	}
	if string(resp.Kvs[0].Value) != old.name {
		t.Fatalf("the election says %s leads; the brokers say %s", resp.Kvs[0].Value, old.name)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, "the old leader stops serving", func() bool { return !old.ready() })
	next := leaderOf(t, a, b)
	if next == old {
		t.Logf("the old leader was elected again")
	}
	l.waitAcks(t, 50, "jobs ACKed after the fence")
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	t.Logf("%d jobs ACKed, every one ran; %d runs beyond the first", acked, again)
	if t.Failed() {
		t.Logf("broker a:\n%s\nbroker b:\n%s", a.log(), b.log())
	}
}

// TestGroupSurvivesOneEtcdMemberOfThree: one member stopped under load,
// the group serves on and loses nothing; with two of three stopped no
// REQUEST is ACKed (etcd has no majority to hold it).
func TestGroupSurvivesOneEtcdMemberOfThree(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leaderOf(t, a, b)
	l := startLoad(t, 4, a, b)
	l.waitAcks(t, 50, "jobs ACKed")
	etcd.Stop(2)
	l.waitAcks(t, 200, "jobs ACKed with one etcd member stopped")
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	t.Logf("one member stopped: %d jobs ACKed, every one ran; %d runs beyond the first", acked, again)

	etcd.Stop(1)
	c, err := client.New(client.Options{Broker: a.frontend + "," + b.frontend, ResendAfter: 500 * time.Millisecond, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		id, err := c.Send(ctx, "q", []byte("no majority"))
		cancel()
		var be *client.BrokerError
		switch {
		case err == nil:
			t.Fatalf("send %d with two of three etcd members stopped: ACKed %s", i, id)
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &be) && be.Code == "unavailable":
		default:
			t.Fatalf("send %d with two of three etcd members stopped: %v", i, err)
		}
	}
}

// TestGroupFlags: the journal is in a data dir or in etcd, not both; a
// bad endpoint or TTL is named.
func TestGroupFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-endpoints", "http://127.0.0.1:1", "--data-dir", t.TempDir()}, "data-dir and etcd-endpoints"},
		{[]string{"--etcd-endpoints", "127.0.0.1:2379"}, "etcd-endpoints"},
		{[]string{"--etcd-endpoints", "http://127.0.0.1:1", "--leader-ttl", "1500ms"}, "leader-ttl"},
		{[]string{"--etcd-endpoints", "http://127.0.0.1:1", "--max-job-size", "2MiB"}, "max-job-size"},
	} {
		_, stderr, err := emq(t, "", append([]string{"broker", "--frontend", bt.FreeEndpoint(t), "--backend", bt.FreeEndpoint(t),
			"--admin", "", "--publisher-incoming", "", "--publisher-outgoing", ""}, tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("emq broker %s: %v, stderr %q; want an error naming %s", strings.Join(tc.args, " "), err, stderr, tc.want)
		}
	}
}

// TestAdminOnEtcdJournal: with no broker of the group running, the admin
// commands read and change the journal in etcd as they do a data dir's;
// while one leads, they refuse and say to use --admin.
func TestAdminOnEtcdJournal(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	eps := strings.Join(etcd.Endpoints(), ",")
	a := newGroupBroker(t, etcd.Endpoints(), "a")
	leaderOf(t, a)
	c, err := client.New(client.Options{Broker: a.frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
		id, err := c.Send(ctx, "stored", []byte("x"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c.Close()
	if _, stderr, err := emq(t, "", "queues", "--etcd-endpoints", eps); err == nil || !strings.Contains(stderr, "a leads the group") {
		t.Fatalf("emq queues while a broker leads: %v %q", err, stderr)
	}
	a.kill()
	var qs []broker.QueueInfo
	bt.Eventually(t, "emq queues on etcd once the leader's lease ended", func() bool {
		out, _, err := emq(t, "", "queues", "--etcd-endpoints", eps, "--json")
		return err == nil && json.Unmarshal([]byte(out), &qs) == nil
	})
	if len(qs) != 1 || qs[0].Name != "stored" || qs[0].Pending != 3 {
		t.Fatalf("queues: %+v, want stored with 3 pending", qs)
	}
	if out, stderr, err := emq(t, "", "jobs", "rm", ids[0], "--etcd-endpoints", eps); err != nil {
		t.Fatalf("emq jobs rm on etcd: %v %s %s", err, out, stderr)
	}
	out, _, err := emq(t, "", "queues", "--etcd-endpoints", eps, "--json")
	if err != nil || json.Unmarshal([]byte(out), &qs) != nil || qs[0].Pending != 2 {
		t.Fatalf("queues after a removal: %s %v", out, err)
	}
	a.start() // the admin resigned: the broker leads again, with the two jobs
	leaderOf(t, a)
}

// TestGroupStandbyShowsWhoLeads: a standby's stats and metrics say who
// leads and what it is, behind the admin token as the leader's are.
func TestGroupStandbyShowsWhoLeads(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	a := newGroupBroker(t, etcd.Endpoints(), "a", "--admin-token", "sesame")
	leaderOf(t, a)
	b := newGroupBroker(t, etcd.Endpoints(), "b", "--admin-token", "sesame")
	leader := leaderOf(t, a, b)
	standby := b
	if leader == b {
		standby = a
	}
	if info := standby.group(); info.Leader != leader.name || info.Name != standby.name {
		t.Fatalf("standby's stats: %+v, want %s leading", info, leader.name)
	}
	for _, c := range []struct {
		b    *groupBroker
		want string
	}{{leader, `emq_group_role{role="leader"} 1`}, {standby, `emq_group_role{role="standby"} 1`}} {
		if got := c.b.metric(t, c.want[:len(c.want)-2]); got != c.want {
			t.Errorf("%s's metrics: %q, want %q", c.b.name, got, c.want)
		}
	}
	if got := leader.metric(t, "emq_group_elections_won_total"); got != "emq_group_elections_won_total 1" {
		t.Errorf("leader's elections: %q", got)
	}
	resp, err := http.Get("http://" + standby.admin + "/api/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("standby's stats without the token: %s, want 401", resp.Status)
	}
}

// TestGroupLeaderStopsGracefully: SIGTERM makes the leader drain as a
// single broker does, then resign: it exits cleanly (it was not fenced)
// and the standby leads, with every ACKed job run.
func TestGroupLeaderStopsGracefully(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leader := leaderOf(t, a, b)
	l := startLoad(t, 4, a, b)
	l.waitAcks(t, 50, "jobs ACKed")
	if err := leader.stop(); err != nil {
		t.Fatalf("the leader's exit after SIGTERM: %v\n%s", err, leader.log())
	}
	if strings.Contains(leader.log(), "fenced") {
		t.Errorf("the leader was fenced on its way out:\n%s", leader.log())
	}
	next := b
	if leader == b {
		next = a
	}
	if leaderOf(t, next) != next {
		t.Fatal("the standby does not lead")
	}
	l.waitAcks(t, 50, "jobs ACKed by the next leader")
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	t.Logf("%d jobs ACKed, every one ran; %d runs beyond the first", acked, again)
}

// TestGroupOnEtcdWithTLSAndAUser: a broker reaches an etcd that takes
// https only and checks users, with --etcd-cacert, --etcd-user and
// --etcd-password; a wrong password is refused by name.
func TestGroupOnEtcdWithTLSAndAUser(t *testing.T) {
	cert, key := bt.SelfSigned(t, t.TempDir())
	etcd := etcdtest.StartWith(t, 1, etcdtest.Config{CertFile: cert, KeyFile: key})
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	a := newGroupBroker(t, etcd.Endpoints(), "a", "--etcd-cacert", cert, "--etcd-user", "root", "--etcd-password", "s3cret")
	leaderOf(t, a)

	_, stderr, err := emq(t, "", "queues", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--etcd-cacert", cert,
		"--etcd-user", "root", "--etcd-password", "wrong")
	if err == nil || !strings.Contains(stderr, "etcd-endpoints") || !strings.Contains(stderr, "authentication failed") {
		t.Fatalf("a wrong etcd password: %v, stderr %q", err, stderr)
	}
}

// TestGroupWithEtcdAway: a broker whose etcd does not answer says so, by
// the flag's name, and stops at SIGTERM while it waits.
func TestGroupWithEtcdAway(t *testing.T) {
	away := "http://" + strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	g := newGroupBroker(t, []string{away}, "a")
	bt.Eventually(t, "a log line saying etcd is away", func() bool {
		return strings.Contains(g.log(), "etcd-endpoints "+away+": cannot get a lease from etcd")
	})
	if err := g.stop(); err != nil {
		t.Fatalf("exit at SIGTERM: %v\n%s", err, g.log())
	}
}

// TestGroupStandbyThatCannotServeHoldsBack: two brokers of a group on one
// host given the same frontend. The standby, which could not bind it if
// elected, does not campaign (no journal load, no election won): it names
// the port once however often it checks again, and leads as soon as the
// port is free.
func TestGroupStandbyThatCannotServeHoldsBack(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	a := newGroupBroker(t, etcd.Endpoints(), "a")
	leaderOf(t, a)
	port := a.frontend[strings.LastIndex(a.frontend, ":")+1:]
	b := newGroupBroker(t, etcd.Endpoints(), "b", "--frontend", a.frontend)
	held := func() int {
		resp, err := b.get("/metrics")
		if err != nil {
			return 0 // not listening yet
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, "emq_group_campaigns_held_back_total "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		return 0
	}
	bt.Eventually(t, "the standby held back three times", func() bool { return held() >= 3 })
	logs := b.log()
	if n := strings.Count(logs, "port "+port+" is held by another process"); n != 1 {
		t.Fatalf("the cause logged %d times after %d checks, want once:\n%s", n, held(), logs)
	}
	if got := b.metric(t, "emq_group_elections_won_total"); got != "emq_group_elections_won_total 0" {
		t.Fatalf("the standby that cannot serve: %q", got)
	}
	if err := a.stop(); err != nil {
		t.Fatalf("the leader's exit after SIGTERM: %v\n%s", err, a.log())
	}
	if leaderOf(t, b) != b {
		t.Fatal("the standby does not lead once the port is free")
	}
	if got := b.metric(t, "emq_group_elections_won_total"); got != "emq_group_elections_won_total 1" {
		t.Fatalf("elections won by the standby: %q, want 1 (one journal load)", got)
	}
}
