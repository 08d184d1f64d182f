package main

// The child-process members of a group that cmd/emq's tests start
// where a process is what is tested (SIGKILL, SIGSTOP, a network
// namespace, systemd's notify socket, an older binary, the emq
// commands); group behaviour alone is tested in process, in package
// group with internal/grouptest.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/netlab"
	"github.com/eventmq/emq/internal/testutil"
	shardpkg "github.com/eventmq/emq/shards"
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
	defer func() {
		if t.Failed() { // what each broker said, to tell a slow election from a broker that never came up
			for _, b := range bs {
				t.Logf("broker %s: group %+v, ready %v; its log:\n%s", b.name, b.group(), b.ready(), b.log())
			}
		}
	}()
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

// startShards starts one broker for each of names, each its own shard
// on etcd (etcdOf[name], or the placement's), after listing them in the
// placement (hashed over all of them) on etcd placement.
func startShards(t testing.TB, placement []string, etcdOf map[string][]string, args []string, names ...string) map[string]*groupBroker {
	t.Helper()
	eps := strings.Join(placement, ",")
	shards := map[string]*groupBroker{}
	for _, name := range names {
		prefix := "/emq/" + name + "/"
		etcd, add := placement, []string{}
		if own := etcdOf[name]; own != nil {
			etcd, add = own, []string{"--shard-etcd", strings.Join(own, ",")}
		}
		b := makeGroupBroker(t, etcd, name+"-1", append([]string{"--shard", name, "--etcd-prefix", prefix, "--placement-endpoints", eps}, args...)...)
		mustEmq(t, append([]string{"shards", "add", name, "--etcd-endpoints", eps, "--frontend", b.frontend, "--backend", b.backend,
			"--shard-admin", b.admin, "--shard-prefix", prefix, "--hashed"}, add...)...)
		shards[name] = b
	}
	for _, b := range shards {
		b.start()
	}
	for _, b := range shards {
		leaderOf(t, b)
	}
	return shards
}

// queuesOf lists the queues a broker's admin API shows.
func queuesOf(t testing.TB, b *groupBroker) map[string]broker.QueueInfo {
	t.Helper()
	var qs []broker.QueueInfo
	if err := json.Unmarshal([]byte(mustEmq(t, "queues", "--admin", b.admin, "--json")), &qs); err != nil {
		t.Fatal(err)
	}
	out := map[string]broker.QueueInfo{}
	for _, q := range qs {
		out[q.Name] = q
	}
	return out
}

// loadTable reads the placement as clients route by it.
func loadTable(etcd []string) (*emqp.RouteTable, int64, error) {
	g := group.DefaultOptions()
	g.Endpoints = etcd
	cli, err := group.NewClient(g)
	if err != nil {
		return nil, 0, err
	}
	defer cli.Close()
	p, rev, err := shardpkg.LoadPlacement(context.Background(), cli, shardpkg.DefaultPlacementPrefix)
	if err != nil {
		return nil, 0, err
	}
	return p.Table(), rev, nil
}
