// Package group runs a broker as one of a replicated group: brokers on
// the same etcd endpoints and prefix, one of which leads (serves eMQP on
// the journal in etcd) while the others stand by.
//
//	            campaign (etcd election, lease of LeaderTTL)
//	standby ───────────────────────────────────────────────▶ leader: a Broker on
//	 /healthz 200, /readyz 503,                                etcdstore, every write
//	 stats: who leads; no eMQP                                 guarded by its election key
//	    ▲                                                         │
//	    └── lease ended, a guarded write refused, etcd unsure ────┘ (Fence: stops at once)
//	        (Shutdown, or Run's ctx ends: drain, then resign, so a standby takes over at once)
//
// A Group owns the etcd client, the session (lease) and the election.
// It tells Options.Serving each leadership's broker (cmd/emq gives the
// admin listener's Serve, which answers as a standby meanwhile), and
// Options.Beside runs beside it (package shards). Each leadership is a
// new broker.Broker, built once elected: it loads the
// journal then, so what was in flight at the leader before is pending
// again, and a standby holds no job state at all. Fencing lives in the
// journal: every etcd transaction carries the guard (Options.JournalOptions),
// so a broker that lost its leadership cannot write (store.ErrFenced),
// hence cannot ACK; the lease's end fences it even when it writes
// nothing. OpenJournal gives the admin tools the same fenced journal
// while no broker leads. Package group uses the broker's exported API
// only, and knows nothing of admin or shards.
//
// An etcd member that goes silent (partitioned, paused) must not stall
// the group while the others serve: the client is given only the members
// that answer a probe (members.go), the lease is renewed by requests of
// its own that go to those (lease.go), a member without a leader refuses
// at once (WithRequireLeader, in etcdstore), and a request caught on the
// silent member costs at most Options.Timeout (--etcd-timeout, 2 s).
package group

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
)

// Options configure a broker as one of a replicated group: the brokers
// on the same etcd endpoints and prefix.
type Options struct {
	Endpoints []string      // etcd client URLs
	Prefix    string        // the group's keys: PREFIX "journal/" and PREFIX "leader/" ("/emq/")
	TLS       *tls.Config   // to etcd; nil: plain
	Username  string        // etcd user ("" = none)
	Password  string        // and password
	LeaderTTL time.Duration // the leader's lease: how long a dead leader leads (2 s)
	Name      string        // this broker in the election ("" = host:pid)
	// Timeout bounds each request to etcd (2 s): how long an etcd member
	// that stops answering (partitioned, paused) can hold a request sent
	// to it, after which a read is refused and a write's outcome is
	// unknown (the leader steps down). DialTimeout bounds the first
	// connection (5 s).
	Timeout, DialTimeout time.Duration
	// Pipeline is how many of the journal's batches commit at once
	// (etcdstore.Options.Pipeline).
	Pipeline int
	// Gather is how long a commit of several senders' jobs waits for
	// more of them (etcdstore.Options.Gather; 0 = never).
	Gather time.Duration
	// ColdStandby: a standby keeps no copy of the journal's shadow
	// (etcdstore.Warm), and a takeover reads the whole journal.
	ColdStandby bool
	// HoldCompletes is how long a job's Complete may wait for a new job
	// to take its etcd key (etcdstore.Options.HoldCompletes; 0 = never).
	HoldCompletes time.Duration

	// Keys encrypt the journal at rest (--journal-keys; nil = none). New
	// takes the broker's JournalKeys when this is nil.
	Keys *store.Keyring
	// Serving, if set, is told each leadership's broker once it is built,
	// and nil when it has stopped: the admin listener's Serve.
	Serving func(*broker.Broker)
	// Beside, if set, runs beside the group (package shards: the
	// placement of queues on shards, and queue moves).
	Beside Companion
}

// A Companion runs beside a member of a group and each of its
// leaderships, on the group's own etcd client (package shards' Member).
type Companion interface {
	// Run runs for as long as the group's Run, until ctx ends.
	Run(ctx context.Context, cli *clientv3.Client)
	// Prepare fits a new leadership's broker options before its broker is
	// built (its routes; a journal wrapped around OpenJournal's); an
	// error ends the leadership before it serves.
	Prepare(ctx context.Context, opts *broker.Options) error
	// Lead runs beside the leadership's broker b, from when b is built
	// until ctx ends with the leadership.
	Lead(ctx context.Context, b *broker.Broker)
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{Prefix: "/emq/", LeaderTTL: 2 * time.Second, Timeout: 2 * time.Second, DialTimeout: 5 * time.Second,
		Pipeline: etcdstore.DefaultPipeline, Gather: etcdstore.DefaultGather,
		HoldCompletes: etcdstore.DefaultHoldCompletes}
}

// Validate reports the first bad option, named as its flag.
func (g Options) Validate() error {
	switch {
	case len(g.Endpoints) == 0:
		return fmt.Errorf("etcd-endpoints: at least one is needed")
	case !strings.HasPrefix(g.Prefix, "/") || !strings.HasSuffix(g.Prefix, "/"):
		return fmt.Errorf("etcd-prefix: must start and end with /, got %q", g.Prefix)
	case g.LeaderTTL < time.Second || g.LeaderTTL%time.Second != 0:
		return fmt.Errorf("leader-ttl: must be whole seconds, at least 1 s (etcd leases count seconds), got %v", g.LeaderTTL)
	case g.Timeout <= 0:
		return fmt.Errorf("etcd-timeout: must be positive, got %v", g.Timeout)
	case g.Pipeline < 1 || g.Pipeline > 1024:
		return fmt.Errorf("etcd-pipeline: must be 1 to 1024, got %d", g.Pipeline)
	case g.Gather < 0 || g.Gather > time.Second:
		return fmt.Errorf("etcd-gather: must be 0 to 1s, got %v", g.Gather)
	case g.HoldCompletes < 0 || g.HoldCompletes > time.Second:
		return fmt.Errorf("etcd-hold-completes: must be 0 to 1s, got %v", g.HoldCompletes)
	case g.DialTimeout <= 0:
		return fmt.Errorf("etcd dial timeout: must be positive, got %v", g.DialTimeout)
	case (g.Username == "") != (g.Password == ""):
		return fmt.Errorf("etcd-user and etcd-password: give both or neither")
	}
	return CheckEndpoints(g.Endpoints)
}

// CheckEndpoints reports the first etcd client URL that is not one.
func CheckEndpoints(eps []string) error {
	for _, ep := range eps {
		if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
			return fmt.Errorf("etcd-endpoints: %q: want http://host:port or https://host:port", ep)
		}
	}
	return nil
}

// JournalPrefix is where the group's journal lives under prefix.
func JournalPrefix(prefix string) string { return prefix + "journal/" }

// LeaderPrefix is where the group's election runs under prefix.
func LeaderPrefix(prefix string) string { return prefix + "leader/" }

// electionPrefix is what the election's keys start with: etcd's
// concurrency.NewElection adds a "/" to the prefix it is given.
func electionPrefix(prefix string) string { return LeaderPrefix(prefix) + "/" }

// JournalOptions are the options of the group's journal for whoever won
// el: every write guarded by its election key at its revision, so that
// none lands once another leads.
func (g Options) JournalOptions(el *concurrency.Election) etcdstore.Options {
	eo := g.journal()
	eo.Guard = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())}
	return eo
}

// journal is the options of the group's journal whoever opens it: where
// it is, how long a request may take, the commits in flight.
func (g Options) journal() etcdstore.Options {
	eo := etcdstore.DefaultOptions()
	eo.Prefix, eo.Timeout, eo.Pipeline, eo.Gather = JournalPrefix(g.Prefix), g.Timeout, g.Pipeline, g.Gather
	eo.HoldCompletes, eo.Keys = g.HoldCompletes, g.Keys
	return eo
}

// NewClient connects to etcd as g says.
func NewClient(g Options) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: g.Endpoints, DialTimeout: g.DialTimeout, TLS: g.TLS,
		Username: g.Username, Password: g.Password, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd-endpoints %s: %w", strings.Join(g.Endpoints, ","), err)
	}
	return cli, nil
}

// Group is a broker's place in a replicated group. One broker leads: it
// won the election, a key under LeaderPrefix held by its lease. It runs
// as a broker.Broker on the journal in etcd, every write guarded by that
// key (fencing). The others are standbys: they campaign, serve /healthz
// (200), /readyz (503), /metrics and the stats API (who leads), and
// listen on no eMQP endpoint. Until it first reaches etcd a broker is
// "starting": its stats say so, and /readyz 503.
type Group struct {
	opts  Options
	bopts broker.Options
	log   *slog.Logger
	cli   *clientv3.Client

	mu      sync.Mutex
	role    Role
	leader  string
	elected int64
	broker  *broker.Broker // while leading
	cancel  context.CancelFunc
	started bool
	closing bool // Close: a broker elected from now on stops at once
	done    chan struct{}

	// The leader's watchdog (watch): when it last ran (uptime: a step of
	// the wall clock is not a pause; a suspended machine's sleep is), and
	// whether it once found this process stopped for long enough that the
	// lease may have ended.
	ticked  atomic.Int64
	stalled atomic.Bool

	stale []clientv3.LeaseID // terms' leases not revoked yet (Run's goroutine only)

	keys atomic.Pointer[store.Keyring] // Options.Keys, swapped by ReloadJournalKeys

	elections  prometheus.Counter
	changes    prometheus.Counter
	blocked    prometheus.Counter
	stateGauge *prometheus.GaugeVec
}

// ValidateFor is Validate, and whether the broker's options fit a
// journal on etcd (emq config check asks it too).
func (g Options) ValidateFor(opts broker.Options) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if most := etcdstore.MaxJobSize(etcdstore.DefaultOptions().MaxRequestBytes); opts.MaxJobSize > most {
		return fmt.Errorf("max-job-size: %d is over what one etcd request carries (%d bytes; etcd's --max-request-bytes is 1.5 MiB)", opts.MaxJobSize, most)
	}
	return nil
}

// New makes a broker of a replicated group, with opts for the broker it
// runs while it leads (their DataDir and OpenJournal are not used: the
// journal is in etcd).
func New(opts broker.Options, g Options) (*Group, error) {
	if err := g.ValidateFor(opts); err != nil {
		return nil, err
	}
	if g.Name == "" {
		host, _ := os.Hostname()
		g.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if g.Keys == nil {
		g.Keys = opts.JournalKeys
	}
	opts.OpenJournal = func(broker.JournalSetup) (store.Journal, error) { return nil, errors.New("set per term") }
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	grp := &Group{opts: g, bopts: opts, log: opts.Logger, done: make(chan struct{}),
		elections: prometheus.NewCounter(prometheus.CounterOpts{Name: "emq_group_elections_won_total",
			Help: "Elections this broker won (it became the group's leader)."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "emq_group_leader_changes_total",
			Help: "Changes of the group's leader this broker saw (failovers, and its own elections)."}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{Name: "emq_group_campaigns_held_back_total",
			Help: "Times this broker did not campaign because it could not serve if elected (a port held by another process, an unreadable key file); the cause is logged."}),
		stateGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "emq_group_role",
			Help: "1 for this broker's role in the group: leader or standby."}, []string{"role"}),
	}
	grp.setRole(RoleStarting)
	grp.keys.Store(g.Keys)
	var err error
	if grp.cli, err = NewClient(g); err != nil {
		return nil, err
	}
	return grp, nil
}

// Collectors are the group's metrics, for /metrics.
func (g *Group) Collectors() []prometheus.Collector {
	return []prometheus.Collector{g.elections, g.changes, g.blocked, g.stateGauge}
}

// Run campaigns, serves as standby meanwhile,
// and once elected runs a broker on the journal in etcd until ctx ends
// or Shutdown is called (then it drains as a broker does and resigns, so
// a standby takes over at once) or it loses its leadership (its lease
// ended, or a write found another leader): then it campaigns again. What
// was in flight at a leader that stopped is pending again for the next.
// It returns nil when stopped.
func (g *Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.started, g.cancel = true, cancel
	g.mu.Unlock()
	defer close(g.done)
	defer cancel()
	defer g.cli.Close()
	var probing sync.WaitGroup
	defer probing.Wait() // before the client closes (deferred above)
	defer cancel()
	probing.Go(func() { watchMembers(ctx, g.cli, g.opts, g.log) })
	if g.opts.Beside != nil {
		probing.Go(func() { g.opts.Beside.Run(ctx, g.cli) })
	}
	wait, said, held := retryFirst, "", false
	for ctx.Err() == nil {
		served := false
		err := broker.Check(g.bopts)
		if err != nil {
			g.blocked.Inc()
			held = true
			err = fmt.Errorf("this broker could not serve if elected, so it does not campaign: %w", err)
		} else {
			if held {
				g.log.Info("standby: this broker can serve again; campaigning")
				held = false
			}
			served, err = g.term(ctx, g.bopts)
		}
		if ctx.Err() != nil {
			return nil
		}
		if served {
			wait, said = retryFirst, "" // a new cause, whatever it says
		}
		// Each cause is logged once: a standby that cannot serve, or
		// etcd away, says so when it starts, not every time it retries.
		if cause := err.Error(); cause != said {
			g.log.Warn("not leading; trying again", "err", err, "retry_in", wait)
			said = cause
		} else {
			g.log.Debug("not leading; trying again", "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if !served {
			wait = min(2*wait, retryMax)
		}
	}
	return nil
}

// A term that did not reach serving (etcd away; elected, but the broker
// could not start) and a check that found this broker unable to serve
// are tried again after retryFirst, doubling up to retryMax: a standby
// that cannot serve does not load the journal from etcd in a loop. After
// a term that served, the next campaign follows retryFirst after.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 10 * time.Second
)

// Shutdown stops the group's broker gracefully: the leader drains and
// resigns, a standby stops campaigning; it returns once Run has. If ctx
// ends first, the leader's drain is cut short (as Close).
func (g *Group) Shutdown(ctx context.Context) error {
	if !g.stopRun() {
		return nil
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		g.Close()
		return ctx.Err()
	}
}

// Close stops at once: a leader's jobs in flight stay journaled and run
// again under the next leader. It returns once Run has.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	if b := g.current(); b != nil {
		b.Close()
	}
	if g.stopRun() {
		<-g.done
	} else {
		g.cli.Close() // Run's own, never started
	}
	return nil
}

// stopRun ends Run's context; false when Run never started.
func (g *Group) stopRun() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
	return g.started
}

// ReloadCredentials re-reads the CURVE clients and PLAIN users of the
// broker leading (a standby reads them when it is elected).
func (g *Group) ReloadCredentials() error {
	if b := g.current(); b != nil {
		return b.ReloadCredentials()
	}
	return nil
}

// ReloadJournalKeys makes k the journal's keys: the leader's journal
// seals with its first key from now on, and so does every leadership
// after. Keys without one the journal still needs are refused, naming
// it, and the old ones stay.
func (g *Group) ReloadJournalKeys(k *store.Keyring) error {
	if b := g.current(); b != nil {
		if err := b.ReloadJournalKeys(k); err != nil {
			return err
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
		defer cancel()
		if err := etcdstore.CheckKeys(ctx, g.cli, JournalPrefix(g.opts.Prefix), k); err != nil {
			return err
		}
	}
	g.keys.Store(k)
	return nil
}

// ErrNotLeading is a call only the leader answers, made of a standby.
var ErrNotLeading = errors.New("this member does not lead the group")

// Rekey starts the leader's rekey (broker.Broker.Rekey): its journal is
// the group's, and the next leader goes on with a rekey under way.
func (g *Group) Rekey(rate int) (store.RekeyStatus, error) {
	if b := g.current(); b != nil {
		return b.Rekey(rate)
	}
	return store.RekeyStatus{}, ErrNotLeading
}

// RekeyStatus is the leader's rekey progress; ErrNotLeading on a standby.
func (g *Group) RekeyStatus() (store.RekeyStatus, error) {
	if b := g.current(); b != nil {
		return b.RekeyStatus(), nil
	}
	return store.RekeyStatus{}, ErrNotLeading
}

// current is the broker running while this one leads; nil otherwise.
func (g *Group) current() *broker.Broker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broker
}

// newSession makes a session on a lease of LeaderTTL, granted within
// Timeout (etcd away: say so). The session outlives ctx: a leader told
// to stop drains while it still leads, then resigns.
func newSession(ctx context.Context, cli *clientv3.Client, g Options) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, g.Timeout)
	lease, err := cli.Grant(gctx, int64(g.LeaderTTL/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd-endpoints %s: cannot get a lease from etcd: %w", strings.Join(g.Endpoints, ","), err)
	}
	// WithTTL too: Close's revoke waits at most a TTL (past it the lease
	// has ended anyway), not the session's default of a minute.
	session, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(g.LeaderTTL/time.Second)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return session, nil
}

// revokeStale revokes the leases of earlier terms that could not be
// revoked when they ended (etcd was away).
func (g *Group) revokeStale() {
	g.stale = slices.DeleteFunc(g.stale, func(id clientv3.LeaseID) bool {
		ctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
		defer cancel()
		_, err := g.cli.Revoke(ctx, id)
		return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
	})
}

// term is one campaign and, if won, one leadership; served says whether
// its broker came to serve.
func (g *Group) term(ctx context.Context, opts broker.Options) (served bool, err error) {
	granted := uptime()
	session, err := newSession(ctx, g.cli, g.opts)
	if err != nil {
		return false, err
	}
	g.revokeStale()
	defer func() {
		// Revoke the lease: a standby need not wait for it. With etcd
		// away that fails, and the lease, ended for this broker, lives
		// on in etcd: once etcd has a leader again it extends every
		// lease, and this broker's key would hold the election up for
		// a TTL more. The next term revokes it first.
		if session.Close() != nil {
			g.stale = append(g.stale, session.Lease())
		}
	}()
	// Renewing outlives ctx as the session does: a leader told to stop
	// drains while it still leads.
	rctx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRenewing()
	expired := renew(rctx, g.cli, session.Lease(), granted, g.opts.LeaderTTL)
	el := concurrency.NewElection(session, LeaderPrefix(g.opts.Prefix)) // its keys: LeaderPrefix + "/" + lease
	// Who leads now, before this broker says it stands by; then follow.
	lctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	if resp, err := el.Leader(lctx); err == nil && len(resp.Kvs) > 0 {
		g.sawLeader(string(resp.Kvs[0].Value))
	}
	cancel()
	g.setRole(RoleStandby)
	var warm *etcdstore.Warm
	if !g.opts.ColdStandby {
		warm = etcdstore.StartWarm(g.cli, g.opts.journal())
		defer warm.Stop()
		go func(start time.Time) {
			select {
			case <-warm.Loaded():
				g.log.Info("standby: holding a copy of the journal's keys, following the leader", "keys", warm.Keys(),
					"took", time.Since(start).Round(time.Millisecond))
			case <-warm.Done():
			}
		}(time.Now())
	}
	octx, stopFollowing := context.WithCancel(ctx)
	go g.follow(octx, el)
	g.log.Info("standby: campaigning for the group's leadership", "name", g.opts.Name, "etcd", strings.Join(g.opts.Endpoints, ","))
	el, err = campaign(ctx, session, electionPrefix(g.opts.Prefix), g.opts.Name, g.opts.Timeout, expired)
	stopFollowing()
	if err != nil {
		return false, fmt.Errorf("campaign: %w", err)
	}
	start := time.Now()
	g.mu.Lock()
	g.elected++
	g.leader = g.opts.Name
	g.mu.Unlock()
	g.elections.Inc()
	g.setRole(RoleLeader)
	defer g.setRole(RoleStandby)
	g.log.Info("elected leader of the group: loading the journal from etcd", "name", g.opts.Name)

	opts.OpenJournal = func(s broker.JournalSetup) (store.Journal, error) {
		eo := g.opts.JournalOptions(el)
		eo.Keys = g.keys.Load()
		eo.MaxJobSize = opts.MaxJobSize
		eo.OnCommit, eo.OnDamage = s.OnCommit, s.OnDamage
		eo.Warm = warm
		eo.OnWarmMissed = func(err error) {
			g.log.Warn("taking over without the standby's copy of the journal: reading it all", "err", err)
		}
		return etcdstore.Open(g.cli, eo)
	}
	if g.opts.Beside != nil {
		if err := g.opts.Beside.Prepare(ctx, &opts); err != nil {
			return false, err
		}
	}
	b, err := broker.New(opts)
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	g.broker = b
	closing := g.closing
	g.mu.Unlock()
	if closing {
		b.Close()
	}
	if g.opts.Serving != nil {
		g.opts.Serving(b)
	}
	defer func() {
		if g.opts.Serving != nil {
			g.opts.Serving(nil)
		}
		g.mu.Lock()
		g.broker = nil
		g.mu.Unlock()
	}()
	lost := make(chan struct{})
	g.stalled.Store(false)
	g.ticked.Store(int64(uptime()))
	go g.watch(b, lost)
	go func() {
		select {
		case <-expired:
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
	var beside sync.WaitGroup
	bctx, stopBeside := context.WithCancel(ctx)
	if g.opts.Beside != nil {
		beside.Go(func() { g.opts.Beside.Lead(bctx, b) })
	}
	err = b.Run(ctx)
	stopBeside()
	beside.Wait()
	close(lost)
	select {
	case <-b.Ready():
		served = true
	default:
	}
	if ctx.Err() != nil && err == nil {
		rctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
		_ = el.Resign(rctx)
		cancel()
	}
	if err == nil {
		err = errors.New("the broker stopped")
	}
	return served, err
}

// watch runs while this broker leads, until lost is closed. A leader
// whose process was stopped (SIGSTOP, a frozen VM) or starved for a
// lease's TTL may have lost its lease meanwhile, and another may lead:
// on SIGCONT it would say ready and serve what it holds until etcd's
// answer to its next keepalive says so. watch notes when it last ran;
// running refuses readiness once it has not for half the TTL, and a gap
// of a TTL fences the broker at once (a false alarm costs a failover,
// never a job: every write is guarded anyway).
func (g *Group) watch(b *broker.Broker, lost chan struct{}) {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-lost:
			return
		case <-tick.C:
			now := int64(uptime())
			gap := time.Duration(now - g.ticked.Load())
			if gap >= g.opts.LeaderTTL {
				g.stalled.Store(true) // before the tick below: running never sees it fresh
				g.log.Warn("leader: this process did not run for a lease's TTL; its lease may have ended: stepping down",
					"stopped_for", gap.Round(time.Millisecond), "leader_ttl", g.opts.LeaderTTL)
				b.Fence(fmt.Errorf("%w: this broker did not run for %v, its lease's TTL is %v", store.ErrFenced, gap.Round(time.Millisecond), g.opts.LeaderTTL))
			}
			g.ticked.Store(now)
		}
	}
}

// watchEvery is how often the leader's watchdog runs.
const watchEvery = 100 * time.Millisecond

// Running is the admin server's Ready: an error while the leader's
// watchdog has not run for half a TTL, or found the process stopped.
func (g *Group) Running() error {
	if g.stalled.Load() {
		return errors.New("this broker was stopped for its lease's TTL: it steps down")
	}
	if quiet := time.Duration(int64(uptime()) - g.ticked.Load()); quiet >= g.opts.LeaderTTL/2 {
		return fmt.Errorf("this broker's watchdog has not run for %v: its lease may have ended", quiet.Round(time.Millisecond))
	}
	return nil
}

// follow keeps who leads the group up to date while this broker
// campaigns in el, until ctx ends.
func (g *Group) follow(ctx context.Context, el *concurrency.Election) {
	for resp := range el.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			g.sawLeader(string(resp.Kvs[0].Value))
		}
	}
}

// sawLeader notes that name leads the group.
func (g *Group) sawLeader(name string) {
	g.mu.Lock()
	changed := g.leader != name
	g.leader = name
	g.mu.Unlock()
	if changed {
		g.changes.Inc()
		g.log.Info("the group's leader", "leader", name)
	}
}

// Info says what this broker is in the group and who leads.
func (g *Group) Info() Info {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Info{Role: g.role, Name: g.opts.Name, Leader: g.leader, Elections: g.elected}
}

func (g *Group) setRole(r Role) {
	g.mu.Lock()
	g.role = r
	g.mu.Unlock()
	for _, each := range []Role{RoleLeader, RoleStandby} {
		v := 0.0
		if each == r {
			v = 1
		}
		g.stateGauge.WithLabelValues(each.String()).Set(v)
	}
}

// Leader is the name of the broker leading the group under prefix ("" =
// none now).
func Leader(ctx context.Context, cli *clientv3.Client, prefix string) (string, error) {
	resp, err := cli.Get(ctx, electionPrefix(prefix), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// OpenJournal opens the group's journal in etcd while no broker of the
// group leads (for the admin tools): it campaigns itself, as an "emq
// admin" of this host and process, for as long as the journal is open,
// so that its writes are fenced as a leader's are and no broker leads
// meanwhile. release, after the journal's Close, resigns and lets go of
// the etcd client.
func OpenJournal(g Options) (j store.Journal, release func(), err error) {
	if err := g.Validate(); err != nil {
		return nil, nil, err
	}
	cli, err := NewClient(g)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (store.Journal, func(), error) { cli.Close(); return nil, nil, err }
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout)
	defer cancel()
	leader, err := cli.Get(ctx, LeaderPrefix(g.Prefix), clientv3.WithFirstCreate()...)
	if err != nil {
		return fail(fmt.Errorf("etcd-endpoints %s: %w", strings.Join(g.Endpoints, ","), err))
	}
	if len(leader.Kvs) > 0 {
		return fail(fmt.Errorf("%s leads the group on etcd %s: manage its journal online with --admin (its admin address), or stop the group's brokers first",
			leader.Kvs[0].Value, g.Prefix))
	}
	session, err := newSession(ctx, cli, g)
	if err != nil {
		return fail(err)
	}
	host, _ := os.Hostname()
	el, err := campaign(ctx, session, electionPrefix(g.Prefix), fmt.Sprintf("emq admin (%s:%d)", host, os.Getpid()), g.Timeout, nil)
	if err != nil {
		session.Close()
		return fail(fmt.Errorf("a broker of the group started meanwhile (%w): use --admin", err))
	}
	release = func() {
		rctx, rcancel := context.WithTimeout(context.Background(), g.Timeout)
		defer rcancel()
		_ = el.Resign(rctx)
		session.Close()
		cli.Close()
	}
	eo := g.JournalOptions(el)
	eo.CompactEvery = 0 // the broker's task
	ej, err := etcdstore.Open(cli, eo)
	if err != nil {
		release()
		return nil, nil, err
	}
	return ej, release, nil
}

// ReadJournal opens the group's journal in etcd for reading only, also
// while a broker of the group leads (a backup): it campaigns for nothing
// and writes nothing. release, after the journal's Close, lets go of the
// etcd client.
func ReadJournal(g Options) (j store.Journal, release func(), err error) {
	if err := g.Validate(); err != nil {
		return nil, nil, err
	}
	cli, err := NewClient(g)
	if err != nil {
		return nil, nil, err
	}
	eo := g.journal()
	eo.ReadOnly, eo.CompactEvery = true, 0
	ej, err := etcdstore.Open(cli, eo)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return ej, func() { cli.Close() }, nil
}
