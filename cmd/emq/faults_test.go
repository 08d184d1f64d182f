package main

import (
	"context"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/netlab"
	"github.com/eventmq/emq/internal/zmtp"
)

// The faults a replicated group meets, each class for EMQ_FAULT_ROUNDS
// rounds (1: CI's share, 2.5 minutes; make faults: 20) while jobs flow, on a private network of
// Linux namespaces (internal/netlab): three etcd members and two brokers,
// each a process in a namespace of its own; the senders, the worker and
// the checker are this test process, on the host's link to the bridge.
//
// Checked in every class: every ACKed job runs (the table's "ran" and
// "lost" count what the worker ran of the jobs the senders had ACKed);
// at no sample (every 50 ms) do both brokers answer /readyz 200;
// service resumes by itself.
// Measured: the longest gap between two ACKs in a round. Classes that
// partition the leader from etcd, or lose etcd's majority, check too
// that nothing is ACKed once it cannot have been committed (a broker
// ACKs only what its guarded etcd transaction committed: the journal's
// fencing, tested in store/etcdstore; here the ACK counter of the
// cut-off leader and the ACKs the senders got are what is checked).
//
// To try a fault or a setting: EMQ_FAULT_CLASS (a part of a class's
// name), EMQ_FAULT_HOLD (a cut's or an etcd pause's length, 6 s),
// EMQ_FAULT_BROKER_ARGS (more broker flags), EMQ_FAULT_LOGS (print the
// brokers' logs even when the test passes).
func TestGroupFaults(t *testing.T) { runFaults(t, faultClasses(), false) }

// TestShardFaults: the harness's partition classes with the group as one
// shard of two. The senders and the worker are given the other shard's
// endpoints only, and reach the faulted shard by the placement (ROUTES,
// ERROR moved) on the lab's etcd.
func TestShardFaults(t *testing.T) {
	runFaults(t, slices.DeleteFunc(faultClasses(), func(c faultClass) bool { return !strings.Contains(c.name, "partition") }), true)
}

// runFaults runs classes against a group of two brokers, in a lab of
// network namespaces with its 3-member etcd; sharded, the group is shard
// s1 of a placement whose shard s2 is a third broker, and the load goes
// through s2's endpoints.
func runFaults(t *testing.T, classes []faultClass, sharded bool) {
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("EMQ_FAULT_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if only := os.Getenv("EMQ_FAULT_CLASS"); only != "" {
		classes = slices.DeleteFunc(classes, func(c faultClass) bool { return !strings.Contains(c.name, only) })
	}
	lab := netlab.New(t)
	var etcdNodes []*netlab.Node
	var ips []string
	for i := range 3 {
		n := lab.Node(fmt.Sprintf("etcd%d", i))
		etcdNodes, ips = append(etcdNodes, n), append(ips, n.IP)
	}
	etcd := etcdtest.StartProcs(t, ips, func(i int, name string, args ...string) *exec.Cmd {
		return etcdNodes[i].Command(name, args...)
	})
	nodeA, nodeB := lab.Node("broker-a"), lab.Node("broker-b")
	var nodeC *netlab.Node
	var s1, s2 []string // the shards' brokers' args
	if sharded {
		nodeC = lab.Node("broker-c")
		eps := strings.Join(etcd.Endpoints(), ",")
		addr := func(n *netlab.Node, port int) string { return n.Addr(port) }
		mustEmq(t, "shards", "add", "s1", "--etcd-endpoints", eps, "--shard-prefix", "/emq/s1/",
			"--frontend", "tcp://"+addr(nodeA, labFrontend)+",tcp://"+addr(nodeB, labFrontend),
			"--backend", "tcp://"+addr(nodeA, labBackend)+",tcp://"+addr(nodeB, labBackend),
			"--shard-admin", addr(nodeA, labAdmin)+","+addr(nodeB, labAdmin))
		mustEmq(t, "shards", "add", "s2", "--etcd-endpoints", eps, "--shard-prefix", "/emq/s2/",
			"--frontend", "tcp://"+addr(nodeC, labFrontend), "--backend", "tcp://"+addr(nodeC, labBackend), "--shard-admin", addr(nodeC, labAdmin))
		mustEmq(t, "queues", "place", "q", "s1", "--etcd-endpoints", eps)
		s1, s2 = []string{"--shard", "s1", "--etcd-prefix", "/emq/s1/"}, []string{"--shard", "s2", "--etcd-prefix", "/emq/s2/"}
	}
	var rows [][]string
	for _, class := range classes {
		t.Run(class.name, func(t *testing.T) {
			a, b := newLabBroker(t, nodeA, etcd.Endpoints(), "a", s1...), newLabBroker(t, nodeB, etcd.Endpoints(), "b", s1...)
			leaderOf(t, a, b)
			both := sampleReady(a, b)
			var l *load
			if sharded {
				c := newLabBroker(t, nodeC, etcd.Endpoints(), "c", s2...)
				leaderOf(t, c)
				l = startLoadAt(t, 4, "q", []string{c.frontend}, []string{c.backend})
			} else {
				l = startLoad(t, 4, a, b)
			}
			f := &fault{t: t, lab: lab, etcd: etcd, etcdNodes: etcdNodes, brokers: []*groupBroker{a, b}, load: l}
			t.Cleanup(func() { // a round that failed half-way leaves no cut to the next class
				if err := lab.HealAll(); err != nil {
					t.Error(err)
				}
				for i := range etcdNodes {
					etcd.Signal(i, syscall.SIGCONT)
				}
			})
			var worst time.Duration
			for round := range rounds {
				l.waitAcks(t, 50, fmt.Sprintf("round %d: jobs ACKed", round))
				f.leader, f.round = leaderOf(t, a, b), round
				began := time.Now()
				class.fault(f)
				bt.Eventually(t, "etcd's members agreeing on a leader", func() bool { _, err := etcd.Leader(); return err == nil })
				leaderOf(t, a, b) // one leads, the other (the one faulted too) stands by
				l.waitAcks(t, 50, fmt.Sprintf("round %d: jobs ACKed after the fault", round))
				gap, from := l.longestGap(began, time.Now())
				t.Logf("round %d: longest gap between ACKs %v, from %v after the fault began", round, gap.Round(time.Millisecond), from.Sub(began).Round(time.Millisecond))
				worst = max(worst, gap)
			}
			l.stop()
			tl := l.check(t) // ran and lost: what the worker ran of the jobs ACKed
			twoReady := both()
			if twoReady > 0 {
				t.Errorf("%d samples with both brokers ready", twoReady)
			}
			rows = append(rows, []string{class.name, strconv.Itoa(rounds), strconv.Itoa(tl.acked), strconv.Itoa(tl.ran), strconv.Itoa(tl.lost),
				strconv.Itoa(tl.again), worst.Round(10 * time.Millisecond).String(), strconv.Itoa(twoReady), f.noted()})
		})
	}
	var sb strings.Builder
	sb.WriteString("\n| fault | rounds | ACKed | ran | lost | duplicates | longest gap between ACKs | two-ready samples | also measured |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	t.Log(sb.String())
}

// ttl is the brokers' --leader-ttl (the default).
const ttl = 2 * time.Second

// hold is how long a partition or an etcd member's pause lasts: 3 TTLs,
// or EMQ_FAULT_HOLD.
var hold = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("EMQ_FAULT_HOLD")); err == nil {
		return d
	}
	return 3 * ttl
}()

// fault is what a fault class acts on in one round.
type fault struct {
	t         *testing.T
	lab       *netlab.Lab
	etcd      *etcdtest.Procs
	etcdNodes []*netlab.Node
	brokers   []*groupBroker
	load      *load
	leader    *groupBroker // the broker leading when the round began
	round     int
	worst     time.Duration // the class's own measure, its worst round
	what      string        // what worst measures
}

type faultClass struct {
	name  string
	fault func(f *fault)
}

func faultClasses() []faultClass {
	pause := func(d time.Duration) func(f *fault) {
		return func(f *fault) {
			f.leader.signal(syscall.SIGSTOP)
			<-time.After(d) // the fault's length, not a wait for something
			f.leader.signal(syscall.SIGCONT)
		}
	}
	return []faultClass{
		{"leader partitioned from the etcd majority", func(f *fault) {
			cutOff, other := f.leader, f.standby()
			last := watchAcks(cutOff)
			at := time.Now()
			for _, e := range f.etcdNodes {
				f.must(f.lab.Cut(cutOff.node, e))
			}
			bt.Eventually(f.t, "the standby leading", other.ready)
			lastAck := last()
			for _, e := range f.etcdNodes {
				f.must(f.lab.Heal(cutOff.node, e))
			}
			after := max(0, lastAck.Sub(at)) // 0: none after the cut
			if after > ttl {
				f.t.Errorf("round %d: the leader cut off from etcd ACKed %v after the cut; its lease's TTL is %v", f.round, after, ttl)
			}
			f.note("the cut-off leader's last ACK, after the cut", after)
		}},
		{"etcd leader partitioned from its followers", func(f *fault) {
			i := f.etcdLeader()
			for j, e := range f.etcdNodes {
				if j != i {
					f.must(f.lab.Cut(f.etcdNodes[i], e))
				}
			}
			<-time.After(hold) // the fault's length
			f.must(f.lab.HealAll())
		}},
		{"one etcd member partitioned", func(f *fault) {
			m := f.etcdNodes[(f.etcdLeader()+1)%3] // a follower
			f.must(f.lab.Isolate(m, f.others(m)...))
			<-time.After(hold) // the fault's length
			f.must(f.lab.HealAll())
		}},
		{"etcd majority lost, then healed", func(f *fault) {
			i := f.etcdLeader()
			lost := []*netlab.Node{f.etcdNodes[i], f.etcdNodes[(i+1)%3]}
			for _, m := range lost {
				f.must(f.lab.Isolate(m, f.others(m)...))
			}
			at := time.Now()
			answers := askWhileCut(f.leader, hold)
			healed := time.Now()
			f.must(f.lab.HealAll())
			// What was committed before the cut may be ACKed just after it.
			if n := f.load.acksBetween(at.Add(500*time.Millisecond), healed); n > 0 {
				f.t.Errorf("round %d: %d jobs ACKed while etcd had no majority", f.round, n)
			}
			// The leader answers unavailable while it leads, and nothing
			// once it stepped down (a write caught on a silent member can
			// make that the first thing it does).
			for answer, n := range answers {
				if answer != "unavailable" && answer != "none" {
					f.t.Errorf("round %d: %d REQUESTs to the leader while etcd had no majority were answered %s; want ERROR unavailable or nothing, never an ACK", f.round, n, answer)
				}
			}
			f.t.Logf("round %d: REQUESTs sent to the leader while etcd had no majority: %v", f.round, answers)
			bt.Eventually(f.t, "an ACK after the heal", func() bool { return !f.load.firstAckAfter(healed).IsZero() })
			f.note("service back after the heal", f.load.firstAckAfter(healed).Sub(healed))
		}},
		{"clients partitioned from the leader, then healed", func(f *fault) {
			l := f.leader
			f.must(f.lab.CutPorts(f.lab.Host(), l.node, l.ports()...))
			<-time.After(hold) // the fault's length
			healed := time.Now()
			f.must(f.lab.HealAll())
			bt.Eventually(f.t, "an ACK after the heal", func() bool { return !f.load.firstAckAfter(healed).IsZero() })
			f.note("service back after the heal", f.load.firstAckAfter(healed).Sub(healed))
		}},
		{"leader paused 2×TTL (4 s)", pause(2 * ttl)},
		{"leader paused 5×TTL (10 s)", pause(5 * ttl)},
		{"leader paused 30×TTL (60 s)", pause(30 * ttl)},
		{"an etcd member paused 6 s (the etcd leader, then a follower)", func(f *fault) {
			i := f.etcdLeader()
			if f.round%2 == 1 {
				i = (i + 1) % 3
			}
			f.etcd.Signal(i, syscall.SIGSTOP)
			<-time.After(hold) // the fault's length
			f.etcd.Signal(i, syscall.SIGCONT)
		}},
		{"leader's clock stepped 1 h ahead, then back", func(f *fault) {
			l := f.leader
			before := l.group().Elections
			l.setClock(f.t, time.Hour)
			<-time.After(2 * ttl) // the fault's length
			l.setClock(f.t, 0)
			<-time.After(2 * ttl)
			if g := l.group(); g == nil || g.Role != group.RoleLeader || g.Elections != before {
				f.t.Errorf("round %d: a clock step cost a failover: %+v (elections before: %d)", f.round, g, before)
			}
		}},
		{"leader SIGKILL, started again", func(f *fault) { f.leader.kill(); f.leader.start() }},
		{"leader SIGTERM, started again", func(f *fault) {
			if err := f.leader.stop(); err != nil {
				f.t.Errorf("the leader's exit after SIGTERM: %v", err)
			}
			f.leader.start()
		}},
	}
}

// must fails the round's test on a lab's error.
func (f *fault) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// standby is the broker that did not lead when the round began.
func (f *fault) standby() *groupBroker {
	for _, b := range f.brokers {
		if b != f.leader {
			return b
		}
	}
	return nil
}

// etcdLeader is the index of etcd's leader member.
func (f *fault) etcdLeader() int {
	f.t.Helper()
	var i int
	bt.Eventually(f.t, "etcd's members agreeing on a leader", func() bool {
		var err error
		i, err = f.etcd.Leader()
		return err == nil
	})
	return i
}

// others are every node of the group but n: etcd members, brokers, the host.
func (f *fault) others(n *netlab.Node) []*netlab.Node {
	all := append([]*netlab.Node{f.lab.Host()}, f.etcdNodes...)
	for _, b := range f.brokers {
		all = append(all, b.node)
	}
	return slices.DeleteFunc(all, func(o *netlab.Node) bool { return o == n })
}

// note keeps the worst of a class's own measure over its rounds.
func (f *fault) note(what string, d time.Duration) {
	f.what, f.worst = what, max(f.worst, d)
}

func (f *fault) noted() string {
	if f.what == "" {
		return ""
	}
	return fmt.Sprintf("%s: %v (worst round)", f.what, f.worst.Round(10*time.Millisecond))
}

// Ports of a broker in its namespace: frontend, backend, admin.
const labFrontend, labBackend, labAdmin = 5001, 5002, 8080

// clockEnv names a file holding how far a child broker's schedules'
// clock is ahead of the wall clock (a Go duration).
const clockEnv = "EMQ_TEST_CLOCK"

// newLabBroker runs `emq broker` in node's namespace, in a group on etcd.
func newLabBroker(t *testing.T, node *netlab.Node, etcd []string, name string, args ...string) *groupBroker {
	g := &groupBroker{t: t, name: name, node: node, command: node.Command,
		frontend: "tcp://" + node.Addr(labFrontend), backend: "tcp://" + node.Addr(labBackend), admin: node.Addr(labAdmin),
		clock: filepath.Join(t.TempDir(), "clock")}
	g.setClock(t, 0)
	g.env = []string{clockEnv + "=" + g.clock}
	// The lab's network is private to this machine. EMQ_FAULT_BROKER_ARGS
	// tries other settings (--etcd-timeout 1s).
	args = append(append([]string{"--allow-anonymous", "--admin-token", "lab-token"}, args...), strings.Fields(os.Getenv("EMQ_FAULT_BROKER_ARGS"))...)
	g.setArgs(etcd, args...)
	g.start()
	t.Cleanup(func() {
		g.kill()
		if t.Failed() || os.Getenv("EMQ_FAULT_LOGS") != "" {
			t.Logf("broker %s:\n%s", g.name, g.log())
		}
	})
	return g
}

// ports are the broker's eMQP ports (its admin listener aside).
func (g *groupBroker) ports() []int { return []int{labFrontend, labBackend} }

// setClock sets how far the broker's schedules' clock runs ahead.
func (g *groupBroker) setClock(t *testing.T, ahead time.Duration) {
	tmp := g.clock + ".new"
	if err := os.WriteFile(tmp, []byte(ahead.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, g.clock); err != nil {
		t.Fatal(err)
	}
}

// steppedClock is the child's side of setClock: the wall clock moved by
// what the file says, read every 10 ms.
func steppedClock(path string) func() time.Time {
	var ahead atomic.Int64
	read := func() {
		if b, err := os.ReadFile(path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				ahead.Store(int64(d))
			}
		}
	}
	read()
	go func() {
		for range time.Tick(10 * time.Millisecond) {
			read()
		}
	}()
	return func() time.Time { return time.Now().Add(time.Duration(ahead.Load())).Round(0) }
}

// signal sends sig to the broker's process.
func (g *groupBroker) signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd != nil {
		g.cmd.Process.Signal(sig)
	}
}

// every runs f every d until the returned func is called, which waits
// for the last run to end.
func every(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				f()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// watchAcks samples g's emq_jobs_acked_total every 20 ms until the
// returned func is called, which says when it last rose (zero: never).
func watchAcks(g *groupBroker) (last func() time.Time) {
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	var rose time.Time
	seen := -1.0
	stop := every(20*time.Millisecond, func() {
		req, _ := http.NewRequest("GET", "http://"+g.admin+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+g.token)
		resp, err := hc.Do(req)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "emq_jobs_acked_total "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				if seen >= 0 && n > seen {
					rose = time.Now()
				}
				seen = n
			}
		}
	})
	return func() time.Time { stop(); return rose }
}

// sampleReady asks every broker's /readyz every 50 ms until the returned
// func is called, which says at how many samples more than one said 200.
// A broker that does not answer within 200 ms (paused) is not ready.
func sampleReady(bs ...*groupBroker) (stop func() int) {
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	var two int
	stopSampling := every(50*time.Millisecond, func() {
		ready := make([]bool, len(bs))
		var sampling sync.WaitGroup
		for i, b := range bs {
			sampling.Go(func() {
				resp, err := hc.Get("http://" + b.admin + "/readyz")
				if err == nil {
					resp.Body.Close()
					ready[i] = resp.StatusCode == http.StatusOK
				}
			})
		}
		sampling.Wait()
		n := 0
		for _, r := range ready {
			if r {
				n++
			}
		}
		if n > 1 {
			two++
		}
	})
	return func() int { stopSampling(); return two }
}

// longestGap is the longest time without an ACK between from and to,
// and when it began.
func (l *load) longestGap(from, to time.Time) (time.Duration, time.Time) {
	l.mu.Lock()
	at := slices.Clone(l.ackedAt)
	l.mu.Unlock()
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	last, worst, began := from, time.Duration(0), from
	for _, a := range at {
		if a.Before(from) || a.After(to) {
			continue
		}
		if a.Sub(last) > worst {
			worst, began = a.Sub(last), last
		}
		last = a
	}
	return worst, began
}

// acksBetween counts the ACKs the senders got between from and to.
func (l *load) acksBetween(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.ackedAt {
		if a.After(from) && a.Before(to) {
			n++
		}
	}
	return n
}

// askWhileCut sends the broker a REQUEST every 200 ms for d, each on a
// new connection, and counts the answers: "ACK", an ERROR's code, or
// "none" (no answer within a second, or no connection).
func askWhileCut(g *groupBroker, d time.Duration) map[string]int {
	answers := map[string]int{}
	for end := time.Now().Add(d); time.Now().Before(end); {
		answers[askOnce(g.frontend)]++
		<-time.After(200 * time.Millisecond) // the probe's pace
	}
	return answers
}

func askOnce(endpoint string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := zmtp.Dial(ctx, endpoint, zmtp.DialOptions{})
	if err != nil {
		return "none"
	}
	defer conn.Close()
	if conn.WriteMsgs(emqp.Encode(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("probe")})) != nil {
		return "none"
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	for {
		m, err := emqp.ReadMessage(conn.ReadMsg, func(error) {})
		switch m := m.(type) {
		case nil:
			if err != nil {
				return "none"
			}
		case *emqp.Ack:
			return "ACK"
		case *emqp.Error:
			return m.Code
		}
	}
}
