// Package grouptest runs the brokers of a replicated group (package
// group) in the test process, on a real etcd (internal/etcdtest): each
// member with its eMQP endpoints and admin listener on free 127.0.0.1
// ports, kept across a restart, its log kept for the test and shown
// when it fails. Tests stop a member gracefully (Shutdown) or at once
// (Close), start it again, and wait for roles with deadlines (Leader,
// WaitRole); they reach a member by its admin client and its eMQP
// endpoints. What builds a member is in start.go alone.
//
// Close is abrupt for the broker (no drain: what was in flight stays
// journaled and runs again under the next leader), but the process
// lives on and revokes the lease: a crash, where a standby waits out
// the TTL, is a child process's test (cmd/emq).
package grouptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
)

// Wait is how long a test waits for something that should happen.
const Wait = testutil.Wait

// Config changes the members Start runs.
type Config struct {
	Prefix     string        // the group's etcd prefix ("" = /emq/)
	AdminToken string        // every member's admin token ("" = none)
	LeaderTTL  time.Duration // 0 = the default (2 s)
	// Shard names the group's shard (StartShards sets it), and
	// PlacementPrefix where the placement is ("" = the default).
	Shard, PlacementPrefix string
	// Broker, if set, changes member i's broker options after the
	// harness's own (free ports, quick heartbeats, etcd's job size).
	Broker func(i int, o *broker.Options)
}

// Info is what a member says of itself and of its group.
type Info struct {
	Role      group.Role
	Name      string
	Leader    string // who it says leads ("" = none known)
	Elections int64  // elections it won
	Placement int64  // the placement's version it serves by (shards)
}

// Cluster is a replicated group's members, running in the test process.
type Cluster struct {
	t       testing.TB
	cfg     Config
	etcd    []string
	Members []*Member

	cliOnce sync.Once
	cli     *clientv3.Client
}

// Member is one broker of the group.
type Member struct {
	Name              string
	Frontend, Backend string // tcp://127.0.0.1:PORT, the same across restarts
	c                 *Cluster
	index             int
	adminAddr         string
	logs              *testutil.Buffer

	mu     sync.Mutex
	node   node         // nil while stopped
	info   func() Info  // the running node's (start.go)
	group  *group.Group // the running node's
	done   chan error   // Run's result
	cancel context.CancelFunc
}

// Start runs a one-member etcd and n members of one group on it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartOn(t, etcdtest.Start(t, 1).Endpoints(), n, Config{})
}

// StartOn runs n members of a group on etcd, as cfg says; each is
// closed at cleanup.
func StartOn(t testing.TB, etcd []string, n int, cfg Config) *Cluster {
	t.Helper()
	c := New(t, etcd, n, cfg)
	for _, m := range c.Members {
		m.Start(t)
	}
	return c
}

// New is StartOn without starting the members: their endpoints are
// known (a shard's go into the placement first), and Start runs each.
func New(t testing.TB, etcd []string, n int, cfg Config) *Cluster {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.PlacementPrefix == "" {
		cfg.PlacementPrefix = defaultPlacementPrefix
	}
	c := &Cluster{t: t, cfg: cfg, etcd: etcd}
	name := strings.Trim(strings.ReplaceAll(cfg.Prefix, "/", "-"), "-")
	if cfg.Shard != "" {
		name = cfg.Shard
	}
	for i := range n {
		m := &Member{Name: fmt.Sprintf("%s-%d", name, i+1), c: c, index: i,
			Frontend: bt.FreeEndpoint(t), Backend: bt.FreeEndpoint(t),
			adminAddr: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), logs: new(testutil.Buffer)}
		c.Members = append(c.Members, m)
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			m.stop(false)
		}
		if t.Failed() {
			for _, m := range c.Members {
				t.Logf("member %s:\n%s", m.Name, m.Logs())
			}
		}
	})
	return c
}

// Endpoints are the group's etcd client URLs.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.etcd...) }

// Prefix is the group's etcd prefix.
func (c *Cluster) Prefix() string { return c.cfg.Prefix }

// Frontends and Backends are every member's eMQP endpoints, comma-
// separated, as a client or worker is given a group's.
func (c *Cluster) Frontends() string { return c.join(func(m *Member) string { return m.Frontend }) }

// Backends: see Frontends.
func (c *Cluster) Backends() string { return c.join(func(m *Member) string { return m.Backend }) }

func (c *Cluster) join(f func(*Member) string) string {
	var s []string
	for _, m := range c.Members {
		s = append(s, f(m))
	}
	return strings.Join(s, ",")
}

// Start runs the member (again, after a stop: same name, same ports).
func (m *Member) Start(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.node != nil {
		t.Fatalf("member %s: started while running", m.Name)
	}
	log := slog.New(slog.NewTextHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", m.Name)
	n, err := newNode(m, log)
	if err != nil {
		t.Fatalf("member %s: %v", m.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := n.Run(ctx)
		if err != nil && ctx.Err() == nil { // not asked to stop: the logs a failure shows say why
			log.Error("grouptest: the member's Run returned", "err", err)
		}
		done <- err
	}()
	m.node, m.done, m.cancel = n, done, cancel
}

// Shutdown stops the member gracefully, as a first SIGTERM does: a
// leader drains and resigns. It returns Run's error, or says that it
// did not stop within Wait.
func (m *Member) Shutdown(t testing.TB) error {
	t.Helper()
	return m.stop(true)
}

// Close stops the member at once: a leader's broker stops with no
// drain (see the package doc).
func (m *Member) Close(t testing.TB) {
	t.Helper()
	if err := m.stop(false); err != nil {
		t.Errorf("member %s: closed: %v", m.Name, err)
	}
}

func (m *Member) stop(graceful bool) error {
	m.mu.Lock()
	n, done, cancel := m.node, m.done, m.cancel
	m.node, m.info = nil, nil
	m.mu.Unlock()
	if n == nil {
		return nil
	}
	defer cancel()
	ctx, hurry := context.WithTimeout(context.Background(), Wait)
	defer hurry()
	if graceful {
		if err := n.Shutdown(ctx); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	} else {
		go n.Close() // waited for below, with a deadline
	}
	select {
	case err := <-done:
		return err
	case <-time.After(Wait):
		return errors.New("Run did not return within " + Wait.String())
	}
}

// Running says whether the member was started and not stopped.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.node != nil
}

// Info is what the member says of itself; the zero Info while stopped.
func (m *Member) Info() Info {
	m.mu.Lock()
	info := m.info
	m.mu.Unlock()
	if info == nil {
		return Info{}
	}
	return info()
}

// Group is the member's running group (nil while stopped).
func (m *Member) Group() *group.Group {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.node == nil {
		return nil
	}
	return m.group
}

// Role is the member's role: starting, standby, leader, or RoleNone
// while stopped.
func (m *Member) Role() group.Role { return m.Info().Role }

// Leading says whether the member says it leads and its admin listener
// says it is ready (serving).
func (m *Member) Leading() bool { return m.Role() == group.RoleLeader && m.Ready() }

// Ready says whether the member's /readyz answers 200: it leads and
// serves.
func (m *Member) Ready() bool {
	status, _ := m.Get("/readyz")
	return status == http.StatusOK
}

// Get asks the member's admin listener for path, with the token: the
// status and body; 0 when it does not answer.
func (m *Member) Get(path string) (status int, body string) {
	req, err := http.NewRequest("GET", "http://"+m.adminAddr+path, nil)
	if err != nil {
		return 0, ""
	}
	if m.c.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+m.c.cfg.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metric is the line of the member's /metrics that starts with name
// ("" = none).
func (m *Member) Metric(name string) string {
	_, body := m.Get("/metrics")
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// AdminAddr is the member's admin listener, host:port.
func (m *Member) AdminAddr() string { return m.adminAddr }

// Admin is a client of the member's admin API, with the token.
func (m *Member) Admin(t testing.TB) *admin.Client {
	t.Helper()
	c, err := admin.NewClient(admin.ClientOptions{Addr: m.adminAddr, Token: m.c.cfg.AdminToken, Timeout: Wait})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Queue is queue as the member's admin API shows it (zero: none).
func (m *Member) Queue(t testing.TB, queue string) broker.QueueInfo {
	t.Helper()
	qs, err := m.Admin(t).Queues(context.Background())
	if err != nil {
		t.Fatalf("member %s: queues: %v", m.Name, err)
	}
	for _, q := range qs {
		if q.Name == queue {
			return q
		}
	}
	return broker.QueueInfo{}
}

// Logs is what the member logged, over all its runs.
func (m *Member) Logs() string { return m.logs.String() }

// WaitRole waits until the member's role is role.
func (m *Member) WaitRole(t testing.TB, role group.Role) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("member %s: role %s", m.Name, role), func() bool { return m.Role() == role })
}

// Leader waits until exactly one running member leads and serves, and
// every other running one stands by and is not ready; it returns the
// leader.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	var leader *Member
	testutil.Eventually(t, "one member leading, the others standing by", func() bool {
		leader = nil
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			switch role := m.Role(); {
			case role == group.RoleLeader && m.Ready():
				if leader != nil {
					return false
				}
				leader = m
			case role != group.RoleStandby || m.Ready():
				return false
			}
		}
		return leader != nil
	})
	return leader
}

// Standbys are the running members but m.
func (c *Cluster) Standbys(m *Member) []*Member {
	var out []*Member
	for _, o := range c.Members {
		if o != m && o.Running() {
			out = append(out, o)
		}
	}
	return out
}

// Etcd is a client of the group's etcd (the same at each call),
// closed at cleanup.
func (c *Cluster) Etcd(t testing.TB) *clientv3.Client {
	t.Helper()
	c.cliOnce.Do(func() { c.cli = etcdClient(t, c.etcd) })
	return c.cli
}

func etcdClient(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Election is the group's election key in etcd now: the key, its lease
// and the name of who holds it ("" = nobody leads).
func (c *Cluster) Election(t testing.TB) (key string, lease clientv3.LeaseID, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	key, lease, name, err := leaderKey(ctx, c.Etcd(t), c.cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return key, lease, name
}

// StartShards runs a group of n members for each shard of names on
// etcd, each under prefix /emq/NAME/, after writing each into the
// placement on etcd (at the default placement prefix), hashed over all
// of them; it waits until each has a leader.
func StartShards(t testing.TB, etcd []string, n int, names ...string) map[string]*Cluster {
	t.Helper()
	cli := etcdClient(t, etcd)
	shards := map[string]*Cluster{}
	for _, name := range names {
		c := New(t, etcd, n, Config{Prefix: "/emq/" + name + "/", Shard: name})
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		err := addShard(ctx, cli, c.cfg.PlacementPrefix, name, c, true)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		shards[name] = c
	}
	for _, c := range shards {
		for _, m := range c.Members {
			m.Start(t)
		}
	}
	for _, c := range shards {
		c.Leader(t)
	}
	return shards
}

// Table is the placement on etcd (at the default placement prefix) as
// clients route by it.
func Table(t testing.TB, etcd []string) *emqp.RouteTable {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	tb, err := table(ctx, cli, defaultPlacementPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// Send sends a job to queue at frontends and returns its msgid once
// ACKed.
func Send(t testing.TB, frontends, queue string) string {
	t.Helper()
	cl, err := client.New(client.Options{Broker: frontends, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	id, err := cl.Send(ctx, queue, []byte(fmt.Sprint("job of ", queue)))
	if err != nil {
		t.Fatal(err)
	}
	return id
}
