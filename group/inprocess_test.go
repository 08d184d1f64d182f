package group_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/grouptest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
)

// Of three brokers one leads and serves eMQP; the others stand by,
// say who leads, and listen on no eMQP endpoint.
func TestOneLeadsTheOthersStandBy(t *testing.T) {
	c := grouptest.Start(t, 3)
	leader := c.Leader(t)
	if n := leader.Info().Elections; n != 1 {
		t.Errorf("the leader won %d elections, want 1", n)
	}
	for _, m := range c.Standbys(leader) {
		testutil.Eventually(t, m.Name+" naming the leader", func() bool { return m.Info().Leader == leader.Name })
		if conn, err := net.Dial("tcp", strings.TrimPrefix(m.Frontend, "tcp://")); err == nil {
			conn.Close()
			t.Errorf("standby %s listens on its frontend", m.Name)
		}
	}
	id := grouptest.Send(t, c.Frontends(), "q")
	if _, err := leader.Admin(t).Job(context.Background(), id, false); err != nil {
		t.Fatalf("the job sent to the group's frontends, at the leader: %v", err)
	}
}

// A standby's stats and metrics say who leads and what it is, behind
// the admin token as the leader's are.
func TestStandbyShowsWhoLeads(t *testing.T) {
	c := grouptest.StartOn(t, etcdtest.Start(t, 1).Endpoints(), 2, grouptest.Config{AdminToken: "sesame"})
	leader := c.Leader(t)
	standby := c.Standbys(leader)[0]
	testutil.Eventually(t, standby.Name+" naming the leader", func() bool { return standby.Info().Leader == leader.Name })
	st, err := standby.Admin(t).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Group == nil || st.Group.Leader != leader.Name || st.Group.Name != standby.Name || st.Group.Role != group.RoleStandby {
		t.Fatalf("the standby's stats: %+v, want %s standing by, %s leading", st.Group, standby.Name, leader.Name)
	}
	for m, want := range map[*grouptest.Member]string{leader: `emq_group_role{role="leader"} 1`, standby: `emq_group_role{role="standby"} 1`} {
		if got := m.Metric(want[:len(want)-2]); got != want {
			t.Errorf("%s's metrics: %q, want %q", m.Name, got, want)
		}
	}
	if got := leader.Metric("emq_group_elections_won_total"); got != "emq_group_elections_won_total 1" {
		t.Errorf("the leader's elections: %q", got)
	}
	resp, err := http.Get("http://" + standby.AdminAddr() + "/api/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the standby's stats without the token: %s, want 401", resp.Status)
	}
}

// The leader closed at once: another leads before the old one's lease
// would have ended (it was revoked), and delivers again the jobs the old
// one had dispatched and not seen replied, with every other job; the old
// one, started again, stands by.
func TestTakeoverDeliversWhatWasInFlight(t *testing.T) {
	// A TTL past Wait: only the revoke lets the standby take over in time.
	c := grouptest.StartOn(t, etcdtest.Start(t, 1).Endpoints(), 3, grouptest.Config{LeaderTTL: 30 * time.Second})
	old := c.Leader(t)
	sent := map[string]bool{}
	for range 10 {
		sent[grouptest.Send(t, c.Frontends(), "q")] = true
	}
	w := bt.Worker(t, old.Backend, "w1", "q")
	w.Ready(3)
	for range 3 {
		if j := bt.Expect[*emqp.Request](w); !sent[j.MsgID] {
			t.Fatalf("the worker got %s, not sent", j.MsgID)
		}
	}
	old.Close(t)
	w.Close()
	next := c.Leader(t)
	w2 := bt.Worker(t, next.Backend, "w2", "q")
	w2.Ready(len(sent))
	got := map[string]bool{}
	for range sent {
		j := bt.Expect[*emqp.Request](w2)
		if !sent[j.MsgID] || got[j.MsgID] {
			t.Fatalf("the new leader delivered %s: not sent, or twice", j.MsgID)
		}
		got[j.MsgID] = true
		w2.Reply(j.MsgID, nil)
	}
	old.Start(t)
	if c.Leader(t) != next {
		t.Fatal("the old leader, started again, took over")
	}
}

// Shutdown drains the leader as a broker's does (a job in flight is
// replied, and not run again) and resigns: when it returns the old
// leader holds no election key, so the standby takes over without
// waiting for the lease, and it was not fenced.
func TestShutdownDrainsAndResigns(t *testing.T) {
	c := grouptest.StartOn(t, etcdtest.Start(t, 1).Endpoints(), 2, grouptest.Config{LeaderTTL: 30 * time.Second})
	old := c.Leader(t)
	id := grouptest.Send(t, c.Frontends(), "q")
	w := bt.Worker(t, old.Backend, "w1", "q")
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	stopped := make(chan error, 1)
	go func() { stopped <- old.Shutdown(t) }()
	testutil.Eventually(t, "the old leader draining", func() bool { return !old.Ready() })
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a job in flight: no drain", err)
	default:
	}
	if q := old.Queue(t, "q"); q.InFlight != 1 {
		t.Fatalf("the draining leader's queue: %+v, want its job in flight", q)
	}
	w.Reply(id, nil)
	if err := testutil.Recv(t, stopped, "Shutdown's return"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, _, name := c.Election(t); name == old.Name {
		t.Fatalf("%s still holds the election after its Shutdown", old.Name)
	}
	if logs := old.Logs(); strings.Contains(logs, "fenced") {
		t.Errorf("the leader was fenced on its way out:\n%s", logs)
	}
	next := c.Leader(t)
	qs, err := next.Admin(t).Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "q" && (q.Pending != 0 || q.InFlight != 0) {
			t.Fatalf("the job replied during the drain is at the next leader: %+v", q)
		}
	}
}

// The leader stopped gracefully under load: the standby leads, and every
// ACKed job runs.
func TestShutdownUnderLoadLosesNothing(t *testing.T) {
	c := grouptest.Start(t, 2)
	old := c.Leader(t)
	l := c.StartLoad(t, 4, "q")
	l.WaitAcks(t, 50, "jobs ACKed")
	if err := old.Shutdown(t); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	c.Leader(t)
	l.WaitAcks(t, 50, "jobs ACKed by the next leader")
	acked, again := l.Check(t)
	t.Logf("%d jobs ACKed, every one ran; %d runs beyond the first", acked, again)
}

// A leader whose election key is gone (another leads now) cannot ACK:
// a REQUEST it takes is refused by the journal's guard, the broker
// fences itself off, and the job is nowhere.
func TestLeaderThatLostTheElectionCannotAck(t *testing.T) {
	c := grouptest.Start(t, 2)
	old := c.Leader(t)
	p := bt.Dial(t, old.Frontend, "c")
	before := p.Request("q", "", []byte("before"))
	key, _, name := c.Election(t)
	if name != old.Name {
		t.Fatalf("the election says %s leads; the members say %s", name, old.Name)
	}
	if _, err := c.Etcd(t).Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	after := emqp.NewID()
	p.Send(&emqp.Request{MsgID: after, Queue: "q", Payload: []byte("after")})
	for answered := false; !answered; {
		m, ok := p.TryRecv(grouptest.Wait)
		switch m := m.(type) {
		case *emqp.Ack:
			if m.AckedID == after {
				t.Fatalf("the leader that lost the election ACKed %s", after)
			}
		case *emqp.Error, *emqp.Disconnect, *emqp.Kbye:
			answered = true
		default:
			if !ok {
				t.Fatal("no answer to the REQUEST, nor a goodbye, from the leader that lost the election")
			}
		}
	}
	testutil.Eventually(t, "the old leader fencing itself off", func() bool {
		return strings.Contains(old.Logs(), "fenced this broker off") && !old.Ready()
	})
	next := c.Leader(t)
	a := next.Admin(t)
	if _, err := a.Job(context.Background(), after, false); err == nil {
		t.Fatalf("the job the fenced leader took is stored")
	}
	if _, err := a.Job(context.Background(), before, false); err != nil {
		t.Fatalf("the job ACKed before: %v", err)
	}
}

// A leader whose lease ended stops serving even when it writes nothing:
// it fences itself off, and the other leads.
func TestLeaderWhoseLeaseEndedStopsServing(t *testing.T) {
	c := grouptest.Start(t, 2)
	old := c.Leader(t)
	_, lease, _ := c.Election(t)
	if _, err := c.Etcd(t).Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the old leader stopping", func() bool { return !old.Ready() })
	if !strings.Contains(old.Logs(), "lease ended") {
		t.Errorf("the old leader's logs do not say its lease ended:\n%s", old.Logs())
	}
	c.Leader(t)
}

// Under load, the leader's lease revoked (as when it is cut off from
// etcd past its TTL): it stops serving, one leads, and every ACKed job
// runs.
func TestLeaseRevokedUnderLoadLosesNothing(t *testing.T) {
	c := grouptest.StartOn(t, etcdtest.Start(t, 3).Endpoints(), 2, grouptest.Config{})
	old := c.Leader(t)
	l := c.StartLoad(t, 4, "q")
	l.WaitAcks(t, 50, "jobs ACKed")
	_, lease, name := c.Election(t)
	if name != old.Name {
		t.Fatalf("the election says %s leads; the members say %s", name, old.Name)
	}
	if _, err := c.Etcd(t).Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the old leader stopping", func() bool { return !old.Ready() })
	c.Leader(t)
	l.WaitAcks(t, 50, "jobs ACKed after the fence")
	acked, again := l.Check(t)
	t.Logf("%d jobs ACKed, every one ran; %d runs beyond the first", acked, again)
}

// One etcd member of three stopped under load: the group serves on and
// loses nothing. Two of three stopped: no REQUEST is ACKed (etcd has no
// majority to hold it).
func TestSurvivesOneEtcdMemberOfThree(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	c := grouptest.StartOn(t, etcd.Endpoints(), 2, grouptest.Config{})
	c.Leader(t)
	l := c.StartLoad(t, 4, "q")
	l.WaitAcks(t, 50, "jobs ACKed")
	etcd.Stop(2)
	l.WaitAcks(t, 200, "jobs ACKed with one etcd member stopped")
	acked, again := l.Check(t)
	t.Logf("one member stopped: %d jobs ACKed, every one ran; %d runs beyond the first", acked, again)

	etcd.Stop(1)
	cl, err := client.New(client.Options{Broker: c.Frontends(), ResendAfter: 500 * time.Millisecond, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		id, err := cl.Send(ctx, "q", []byte("no majority"))
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

// A broker whose etcd does not answer says so, naming the endpoints'
// flag, and stops when told to while it waits.
func TestEtcdAwayIsNamedAndShutdownStops(t *testing.T) {
	away := "http://" + strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	c := grouptest.StartOn(t, []string{away}, 1, grouptest.Config{})
	m := c.Members[0]
	testutil.Eventually(t, "a log line saying etcd is away", func() bool {
		return strings.Contains(m.Logs(), "etcd-endpoints "+away+": cannot get a lease from etcd")
	})
	if err := m.Shutdown(t); err != nil {
		t.Fatalf("Shutdown while etcd is away: %v", err)
	}
}

// Two brokers of a group given the same frontend. The standby, which
// could not bind it if elected, does not campaign (no journal load, no
// election won): it names the port once however often it checks again,
// and leads as soon as the port is free.
func TestStandbyThatCannotServeHoldsBack(t *testing.T) {
	var c *grouptest.Cluster
	c = grouptest.New(t, etcdtest.Start(t, 1).Endpoints(), 2, grouptest.Config{Broker: func(i int, o *broker.Options) {
		o.Frontend = c.Members[0].Frontend
	}})
	a, b := c.Members[0], c.Members[1]
	a.Start(t)
	c.Leader(t)
	b.Start(t)
	held := func() int {
		v, _ := strings.CutPrefix(b.Metric("emq_group_campaigns_held_back_total "), "emq_group_campaigns_held_back_total ")
		n, _ := strconv.Atoi(v)
		return n
	}
	testutil.Eventually(t, "the standby held back three times", func() bool { return held() >= 3 })
	port := a.Frontend[strings.LastIndex(a.Frontend, ":")+1:]
	if n := strings.Count(b.Logs(), "port "+port+" is held by another process"); n != 1 {
		t.Fatalf("the cause logged %d times after %d checks, want once:\n%s", n, held(), b.Logs())
	}
	if got := b.Metric("emq_group_elections_won_total"); got != "emq_group_elections_won_total 0" {
		t.Fatalf("the standby that cannot serve: %q", got)
	}
	if err := a.Shutdown(t); err != nil {
		t.Fatal(err)
	}
	if c.Leader(t) != b {
		t.Fatal("the standby does not lead once the port is free")
	}
	if got := b.Metric("emq_group_elections_won_total"); got != "emq_group_elections_won_total 1" {
		t.Fatalf("elections won by the standby: %q, want 1 (one journal load)", got)
	}
}

// A group with --journal-keys: no etcd value holds a payload's text, the
// warm standby takes over with the keys and delivers the job whole.
func TestGroupEncryptedAtRest(t *testing.T) {
	line, err := store.NewJournalKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := store.ParseKeyring("keys", []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t, 1).Endpoints()
	c := grouptest.StartOn(t, etcd, 2, grouptest.Config{LeaderTTL: 30 * time.Second,
		Broker: func(_ int, o *broker.Options) { o.JournalKeys = keys }})
	old := c.Leader(t)
	const secret = "a payload nobody reads in etcd"
	cl, err := client.New(client.Options{Broker: c.Frontends(), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), grouptest.Wait)
	defer cancel()
	id, err := cl.Send(ctx, "q", []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Etcd(t).Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if bytes.Contains(kv.Value, []byte(secret)) {
			t.Fatalf("etcd key %s holds the payload's text", kv.Key)
		}
	}
	old.Close(t)
	next := c.Leader(t)
	w := bt.Worker(t, next.Backend, "w", "q")
	w.Ready(1)
	if j := bt.Expect[*emqp.Request](w); j.MsgID != id || string(j.Payload) != secret {
		t.Fatalf("the new leader delivered %s %q, want %s and its payload", j.MsgID, j.Payload, id)
	}
}
