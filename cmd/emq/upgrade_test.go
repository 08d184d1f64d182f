package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
)

// olderRelease is the commit an upgrade is tested from: the last landed
// before the journal's etcd format 5 (jobs in slots), whose brokers write
// format 4 (each job at its own key, jobs/MSGID).
const olderRelease = "a97bb1d"

// olderEmq builds emq as it was at olderRelease, from this checkout's
// history, with the modules already here (no network): skipped where
// there is no history, or failed under EMQ_REQUIRE_UPGRADE (CI).
func olderEmq(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_UPGRADE", "no git checkout to build an older emq from: %v", err)
	}
	repo := strings.TrimSpace(string(top))
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "src.tar")
	archive := exec.Command("git", "archive", "-o", tarball, olderRelease)
	archive.Dir = repo
	if out, err := archive.CombinedOutput(); err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_UPGRADE", "commit %s is not in this checkout's history: %v\n%s", olderRelease, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", olderRelease, err, out)
	}
	bin := filepath.Join(dir, "emq-old")
	build := exec.Command("go", "build", "-o", bin, "./cmd/emq")
	build.Dir = src
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building emq at %s: %v\n%s", olderRelease, err, out)
	}
	return bin
}

// A group of two brokers of an older release is upgraded while jobs
// flow, one broker at a time: the standby is replaced by this build,
// then the leader stops (SIGTERM: it drains and resigns), the new one
// leads and brings the journal's format up, and the old leader is
// replaced too. Every job ACKed along the way runs; the journal is of
// this build's format, which the older binary refuses, by name.
func TestGroupRollingUpgrade(t *testing.T) {
	old := olderEmq(t)
	etcd := etcdtest.Start(t, 3)
	runOld := func(_ string, args ...string) *exec.Cmd { return exec.Command(old, args...) }
	a := &groupBroker{t: t, name: "a", frontend: bt.FreeEndpoint(t), backend: bt.FreeEndpoint(t),
		admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), command: runOld}
	b := &groupBroker{t: t, name: "b", frontend: bt.FreeEndpoint(t), backend: bt.FreeEndpoint(t),
		admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), command: runOld}
	for _, g := range []*groupBroker{a, b} {
		g.setArgs(etcd.Endpoints())
		g.start()
		t.Cleanup(g.kill)
	}
	leader := leaderOf(t, a, b)
	standby := a
	if leader == a {
		standby = b
	}
	l := startLoad(t, 4, a, b)
	bt.Eventually(t, "jobs flowing through the older group", func() bool { return l.ackedCount() > 200 })

	// The standby, replaced by this build.
	if err := standby.stop(); err != nil {
		t.Fatalf("the older standby: %v\n%s", err, standby.log())
	}
	standby.command = exec.Command
	standby.start()
	leaderOf(t, leader, standby)
	before := l.ackedCount()
	bt.Eventually(t, "jobs flowing with the new standby", func() bool { return l.ackedCount() > before+200 })

	// The leader stops: the new build leads, and brings the format up.
	if err := leader.stop(); err != nil {
		t.Fatalf("the older leader: %v\n%s", err, leader.log())
	}
	leaderOf(t, standby)
	before = l.ackedCount()
	bt.Eventually(t, "jobs flowing through the new leader", func() bool { return l.ackedCount() > before+200 })
	leader.command = exec.Command
	leader.start()
	leaderOf(t, leader, standby)
	before = l.ackedCount()
	bt.Eventually(t, "jobs flowing through the upgraded group", func() bool { return l.ackedCount() > before+200 })
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	t.Logf("%d jobs ACKed across the upgrade, all run; %d ran twice (in flight at the leader's stop)", acked, again)

	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, group.JournalPrefix(group.DefaultOptions().Prefix)+"meta/format")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "5" {
		t.Fatalf("the journal's format after the upgrade: %v, %v; want 5", resp, err)
	}
	// An older broker started on the upgraded journal refuses it, naming it.
	late := &groupBroker{t: t, name: "late", frontend: bt.FreeEndpoint(t), backend: bt.FreeEndpoint(t),
		admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), command: runOld}
	late.setArgs(etcd.Endpoints())
	late.start()
	t.Cleanup(late.kill)
	for _, g := range []*groupBroker{a, b} {
		g.stop()
	}
	defer func() {
		if t.Failed() {
			t.Logf("the older broker's log:\n%s", late.log())
		}
	}()
	// Its campaign comes once the others are gone.
	testutil.EventuallyWithin(t, 30*time.Second, "the older broker refusing the upgraded journal by name", func() bool {
		return strings.Contains(late.log(), `has format \"5\"; this binary knows \"4\"`)
	})
}
