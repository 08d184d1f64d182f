package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

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
