package etcdtest_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
)

func TestClusterServes(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after a member stopped: %v %v", resp, err)
	}
}

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked()
	os.Exit(m.Run())
}

// Members as processes of their own: they form a cluster, and when the
// leader is paused the others elect another and go on serving.
func TestProcsElectAnotherWhenTheLeaderPauses(t *testing.T) {
	p := etcdtest.StartProcs(t, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, func(_ int, name string, args ...string) *exec.Cmd {
		return exec.Command(name, args...)
	})
	leader, err := p.Leader()
	if err != nil {
		t.Fatal(err)
	}
	p.Signal(leader, syscall.SIGSTOP)
	var others []string
	for i, ep := range p.Endpoints() {
		if i != leader {
			others = append(others, ep)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The first puts time out while the others elect a leader.
	testutil.EventuallyWithin(t, 30*time.Second, "a put with the leader paused", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, "k", "v")
		return err == nil
	})
	p.Signal(leader, syscall.SIGCONT)
	testutil.Eventually(t, "the members agreeing on a leader again", func() bool {
		_, err := p.Leader()
		return err == nil
	})
}
