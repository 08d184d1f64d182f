package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
)

// GroupOptions configure a broker as one of a replicated group: the
// brokers on the same etcd endpoints and prefix.
type GroupOptions struct {
	Endpoints []string      // etcd client URLs
	Prefix    string        // the group's keys: PREFIX "journal/" and PREFIX "leader/" ("/emq/")
	TLS       *tls.Config   // to etcd; nil: plain
	Username  string        // etcd user ("" = none)
	Password  string        // and password
	LeaderTTL time.Duration // the leader's lease: how long a dead leader leads (2 s)
	Name      string        // this broker in the election ("" = host:pid)
	// Timeout bounds each request to etcd (5 s); DialTimeout the first
	// connection (5 s).
	Timeout, DialTimeout time.Duration
}

// DefaultGroupOptions returns the defaults.
func DefaultGroupOptions() GroupOptions {
	return GroupOptions{Prefix: "/emq/", LeaderTTL: 2 * time.Second, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second}
}

// Validate reports the first bad option, named as its flag.
func (g GroupOptions) Validate() error {
	switch {
	case len(g.Endpoints) == 0:
		return fmt.Errorf("etcd-endpoints: at least one is needed")
	case !strings.HasPrefix(g.Prefix, "/") || !strings.HasSuffix(g.Prefix, "/"):
		return fmt.Errorf("etcd-prefix: must start and end with /, got %q", g.Prefix)
	case g.LeaderTTL < time.Second || g.LeaderTTL%time.Second != 0:
		return fmt.Errorf("leader-ttl: must be whole seconds, at least 1 s (etcd leases count seconds), got %v", g.LeaderTTL)
	case g.Timeout <= 0 || g.DialTimeout <= 0:
		return fmt.Errorf("etcd timeouts must be positive")
	case (g.Username == "") != (g.Password == ""):
		return fmt.Errorf("etcd-user and etcd-password: give both or neither")
	}
	for _, ep := range g.Endpoints {
		if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
			return fmt.Errorf("etcd-endpoints: %q: want http://host:port or https://host:port", ep)
		}
	}
	return nil
}

// JournalPrefix is where the group's journal lives under prefix.
func JournalPrefix(prefix string) string { return prefix + "journal/" }

// JournalOptions are the options of the group's journal for whoever won
// el: every write guarded by its election key at its revision, so that
// none lands once another leads.
func (g GroupOptions) JournalOptions(el *concurrency.Election) etcdstore.Options {
	eo := etcdstore.DefaultOptions()
	eo.Prefix = JournalPrefix(g.Prefix)
	eo.Guard = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())}
	eo.Timeout = g.Timeout
	return eo
}

// LeaderPrefix is where the group's election runs under prefix.
func LeaderPrefix(prefix string) string { return prefix + "leader/" }

// Group is a broker's place in a replicated group. One broker leads: it
// won the election, a key under LeaderPrefix held by its lease. It runs
// as a Broker on the journal in etcd, every write guarded by that key
// (fencing). The others are standbys: they campaign, serve /healthz
// (200), /readyz (503), /metrics and the stats API (who leads), and
// listen on no eMQP endpoint.
type Group struct {
	opts  GroupOptions
	bopts Options
	log   *slog.Logger
	cli   *clientv3.Client

	mu      sync.Mutex
	role    string // "standby", "leader"
	leader  string
	elected int64
	broker  *Broker // while leading

	elections prometheus.Counter
	changes   prometheus.Counter
	roleGauge *prometheus.GaugeVec
}

// NewGroupClient connects to etcd as g says.
func NewGroupClient(g GroupOptions) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: g.Endpoints, DialTimeout: g.DialTimeout, TLS: g.TLS,
		Username: g.Username, Password: g.Password, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd-endpoints %s: %w", strings.Join(g.Endpoints, ","), err)
	}
	return cli, nil
}

// NewGroup makes a broker of a replicated group, with opts for the
// Broker it runs while it leads (its DataDir and OpenJournal are not
// used: the journal is in etcd).
func NewGroup(opts Options, g GroupOptions) (*Group, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if most := etcdstore.MaxJobSize(etcdstore.DefaultOptions().MaxRequestBytes); opts.MaxJobSize > most {
		return nil, fmt.Errorf("max-job-size: %d is over what one etcd request carries (%d bytes; etcd's --max-request-bytes is 1.5 MiB)", opts.MaxJobSize, most)
	}
	if g.Name == "" {
		host, _ := os.Hostname()
		g.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.OpenJournal = func(func(int, time.Duration)) (store.Journal, error) { return nil, errors.New("set per term") }
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cli, err := NewGroupClient(g)
	if err != nil {
		return nil, err
	}
	grp := &Group{opts: g, bopts: opts, log: opts.Logger, cli: cli, role: "standby",
		elections: prometheus.NewCounter(prometheus.CounterOpts{Name: "emq_group_elections_won_total",
			Help: "Elections this broker won (it became the group's leader)."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "emq_group_leader_changes_total",
			Help: "Changes of the group's leader this broker saw (failovers, and its own elections)."}),
		roleGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "emq_group_role",
			Help: "1 for this broker's role in the group: leader or standby."}, []string{"role"}),
	}
	grp.setRole("standby")
	grp.bopts.Group = grp
	return grp, nil
}

// Run campaigns, serves as standby meanwhile, and once elected runs a
// Broker on the journal in etcd until ctx ends (then it drains as a
// Broker does and resigns, so a standby takes over at once) or it loses
// its leadership (its lease ended, or a write found another leader): then
// it campaigns again. What was in flight at a leader that stopped is
// pending again for the next. It returns nil when ctx ends.
func (g *Group) Run(ctx context.Context) error {
	defer g.cli.Close()
	for ctx.Err() == nil {
		err := g.term(ctx, g.bopts)
		if ctx.Err() != nil {
			return nil
		}
		g.log.Warn("not leading; campaigning again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // etcd away: do not spin
		}
	}
	return nil
}

// Shutdown ends the leader's drain at once (a second SIGTERM).
func (g *Group) Shutdown() {
	if b := g.current(); b != nil {
		b.Shutdown()
	}
}

// ReloadCredentials re-reads the CURVE clients and PLAIN users of the
// broker leading (a standby reads them when it is elected).
func (g *Group) ReloadCredentials() error {
	if b := g.current(); b != nil {
		return b.ReloadCredentials()
	}
	return nil
}

// current is the broker running while this one leads; nil otherwise.
func (g *Group) current() *Broker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broker
}

// term is one campaign and, if won, one leadership.
func (g *Group) term(ctx context.Context, opts Options) error {
	// The lease is granted within Timeout (etcd away: say so, and let ctx
	// end the wait), then outlives ctx: a leader told to stop drains
	// while it still leads, then resigns.
	gctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	lease, err := g.cli.Grant(gctx, int64(g.opts.LeaderTTL/time.Second))
	cancel()
	if err != nil {
		return fmt.Errorf("etcd-endpoints %s: cannot get a lease from etcd: %w", strings.Join(g.opts.Endpoints, ","), err)
	}
	session, err := concurrency.NewSession(g.cli, concurrency.WithLease(lease.ID),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	defer session.Close() // revokes the lease: a standby need not wait for it
	el := concurrency.NewElection(session, LeaderPrefix(g.opts.Prefix))

	standby, err := g.serveStandby(ctx, opts, el)
	if err != nil {
		return err
	}
	g.log.Info("standby: campaigning for the group's leadership", "name", g.opts.Name, "etcd", strings.Join(g.opts.Endpoints, ","))
	err = el.Campaign(ctx, g.opts.Name)
	standby()
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	start := time.Now()
	g.mu.Lock()
	g.elected++
	g.leader = g.opts.Name
	g.mu.Unlock()
	g.elections.Inc()
	g.setRole("leader")
	defer g.setRole("standby")
	g.log.Info("elected leader of the group: loading the journal from etcd", "name", g.opts.Name)

	opts.OpenJournal = func(onCommit func(int, time.Duration)) (store.Journal, error) {
		eo := g.opts.JournalOptions(el)
		eo.MaxJobSize = opts.MaxJobSize
		eo.OnCommit = onCommit
		return etcdstore.Open(g.cli, eo)
	}
	b, err := New(opts)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.broker = b
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.broker = nil
		g.mu.Unlock()
	}()
	lost := make(chan struct{})
	go func() {
		select {
		case <-session.Done():
			b.Fence(fmt.Errorf("%w: the leader's etcd lease ended", store.ErrFenced))
		case <-lost:
		}
	}()
	go func() {
		select {
		case <-b.Ready():
			g.log.Info("leading: serving", "took", time.Since(start).Round(time.Millisecond))
		case <-lost:
		}
	}()
	err = b.Run(ctx)
	close(lost)
	if ctx.Err() != nil && err == nil {
		rctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
		_ = el.Resign(rctx)
		cancel()
	}
	if err == nil {
		err = errors.New("the broker stopped")
	}
	return err
}

// Fence stops the broker at once, from any goroutine, as a journal
// that says err (wrapping store.ErrFenced) does: nothing more is ACKed
// or dispatched, and Run returns err.
func (b *Broker) Fence(err error) { b.post(func() { b.fence(err) }) }

// serveStandby serves the admin address for a standby and follows who
// leads; the returned func stops both.
func (g *Group) serveStandby(ctx context.Context, opts Options, el *concurrency.Election) (func(), error) {
	octx, cancel := context.WithCancel(ctx)
	go func() {
		for resp := range el.Observe(octx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			name := string(resp.Kvs[0].Value)
			g.mu.Lock()
			changed := g.leader != name
			g.leader = name
			g.mu.Unlock()
			if changed {
				g.changes.Inc()
				g.log.Info("the group's leader", "leader", name)
			}
		}
	}()
	if opts.Admin == "" {
		return cancel, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.collectors()...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "standby: "+g.Info().Leader+" leads", http.StatusServiceUnavailable)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		info := g.Info()
		writeJSON(w, http.StatusOK, StatsInfo{Group: &info})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusServiceUnavailable, apiError{fmt.Sprintf("this broker is a standby; %s leads the group", g.Info().Leader)})
	})
	// The standby reads nothing and changes nothing, but what it shows
	// takes the admin tokens, as the leader's API does.
	var handler http.Handler = mux
	if opts.AdminToken != "" || opts.AdminReadToken != "" {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if tokenRole(opts, token) == roleNone {
				w.Header().Set("WWW-Authenticate", `Bearer realm="emq"`)
				writeJSON(w, http.StatusUnauthorized, apiError{"missing or wrong admin token (Authorization: Bearer TOKEN)"})
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	var srv *http.Server
	var err error
	for range 50 { // the admin port of a leader that just stopped may take a moment to free
		if srv, _, err = serveHTTP(opts, handler, g.log); err == nil || octx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return func() {
		cancel()
		srv.Close()
	}, nil
}

// Info says what this broker is in the group and who leads.
func (g *Group) Info() GroupInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupInfo{Role: g.role, Name: g.opts.Name, Leader: g.leader, Elections: g.elected}
}

func (g *Group) setRole(role string) {
	g.mu.Lock()
	g.role = role
	g.mu.Unlock()
	for _, r := range []string{"leader", "standby"} {
		v := 0.0
		if r == role {
			v = 1
		}
		g.roleGauge.WithLabelValues(r).Set(v)
	}
}

// collectors are the group's metrics, for the leader's /metrics and the
// standby's.
func (g *Group) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.elections, g.changes, g.roleGauge}
}

// role names the broker's place for the dashboard.
func (b *Broker) role() string {
	if b.opts.Group != nil {
		return "leader"
	}
	return "single"
}
