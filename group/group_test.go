package group

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.Leftovers...) }

// silentMember accepts connections and never answers: a partitioned or
// paused etcd member, as its clients see it.
func silentMember(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// A member that stops answering is left out of the client's endpoints,
// so that requests go to the others; it is given back once it answers.
func TestMembersThatDoNotAnswerAreLeftOut(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	silent := silentMember(t)
	g := DefaultOptions()
	g.Endpoints = append(etcd.Endpoints(), silent)
	cli, err := NewClient(g)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); watchMembers(ctx, cli, g, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	testutil.Eventually(t, "the silent member left out", func() bool {
		return slices.Equal(cli.Endpoints(), etcd.Endpoints())
	})
	for range 20 { // each would have waited for Timeout on the silent member
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(rctx, "k", "v")
		rcancel()
		if err != nil {
			t.Fatalf("a put with the silent member left out: %v", err)
		}
	}
	cancel()
	<-done
}

// renew keeps a lease alive with no keepalive stream, and says when it
// ended: here, revoked.
func TestRenewKeepsTheLeaseAndSaysWhenItEnds(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	g := DefaultOptions()
	g.Endpoints = etcd.Endpoints()
	cli, err := NewClient(g)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	granted := uptime()
	lease, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	expired := renew(ctx, cli, lease.ID, granted, time.Second)
	<-time.After(3 * time.Second) // three TTLs: the fault's length, not a wait for something
	select {
	case <-expired:
		t.Fatal("renew gave up on a lease etcd keeps")
	default:
	}
	ttl, err := cli.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("the lease after three TTLs: %+v, %v", ttl, err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-expired:
	case <-time.After(10 * time.Second):
		t.Fatal("renew did not say that a revoked lease ended")
	}
}
