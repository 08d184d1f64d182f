package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/sdnotify"
	"github.com/eventmq/emq/store/etcdstore"
)

func newBrokerCmd() *cobra.Command {
	d := broker.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the broker",
		Long: `Run the broker: clients on --frontend, workers on --backend, the journal in
--data-dir. Every flag can also be set as EMQ_<FLAG> in the environment
(EMQ_DATA_DIR, EMQ_MAX_PENDING, ...) or as a key in a --config file (YAML or
TOML); flags win over the environment, which wins over the file.
SIGTERM or SIGINT stops it gracefully: new jobs are refused and the jobs in
flight get up to --drain-timeout to finish; a second signal stops it at
once (what is still in flight stays journaled and runs after the next
start).`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.String("config", "", "config file (.yaml, .yml or .toml)")
	f.String("frontend", d.Frontend, "ZeroMQ endpoint for clients")
	f.String("backend", d.Backend, "ZeroMQ endpoint for workers")
	f.String("admin", admin.DefaultOptions().Addr, `HTTP address of the admin API, /metrics, /healthz and /readyz ("" = none)`)
	f.String("admin-token", "", "require this Bearer token on every admin request (needed for a non-loopback --admin)")
	f.String("admin-read-token", "", "a second Bearer token that may read everything and change nothing (dashboards, monitoring)")
	f.String("admin-tls-cert", "", "serve the admin API over HTTPS with this certificate (PEM; with --admin-tls-key)")
	f.String("admin-tls-key", "", "the private key (PEM) of --admin-tls-cert")
	f.String("admin-allowed-hosts", "", "host names, comma-separated, that admin requests may carry besides loopback and the listener's address (a name it is reached by)")
	f.String("admin-allowed-origins", "", "origins (scheme://host[:port]), comma-separated, whose web pages may change things through the admin API besides its own")
	f.String("data-dir", d.DataDir, "directory of the journal file "+broker.JournalFile)
	f.Duration("heartbeat-interval", d.HeartbeatInterval, "HEARTBEAT to each worker this often")
	f.Duration("heartbeat-timeout", d.HeartbeatTimeout, "a worker silent this long is lost and its jobs requeued")
	f.Duration("overdue-after", d.OverdueAfter, "a job without a timeout held by a worker this long is overdue: an event, emq_jobs_overdue_total, emq jobs why; it runs on (0 = never)")
	f.String("max-frame-size", mib(d.MaxFrameSize), "largest frame accepted (bytes, KiB, MiB, GiB)")
	f.String("max-job-size", mib(int64(d.MaxJobSize)), "largest job stored: payload, headers and ids (bytes, KiB, MiB, GiB)")
	f.String("journal-segment-size", mib(d.JournalSegmentSize), "size of each write-ahead log segment file beside the journal file (two of them take this much disk at least)")
	f.String("journal-max-log", mib(d.JournalMaxLog), "what the log may hold that the journal file does not yet: disk, and how far the checkpoint may lag (memory holds where each value lies, not payloads); past it REQUESTs get ERROR unavailable until the checkpoint catches up")
	f.Bool("journal-recover", false, "open a journal whose log is damaged in the middle: keep every good record, log what is lost (emq journal check names it first)")
	f.Int("max-pending", d.MaxPending, "jobs per queue beyond which REQUESTs get ERROR queue_full (0 = no limit)")
	f.Int("max-bulk", d.MaxBulk, "most jobs in one BULK (emq send --bulk, client.SendBulk); more get ERROR too_large")
	f.Int("max-connections", d.MaxConnections, "connections of every eMQP and pub/sub endpoint together, handshakes included (0 = no bound; the default is 3/4 of the fd limit)")
	f.Int("max-connections-per-ip", d.MaxConnectionsPerIP, "connections from one IP address (0 = no bound)")
	f.Int("event-buffer", d.EventBuffer, "events a listener of /api/v1/events may fall behind before it is dropped")
	f.Int("max-event-listeners", d.MaxEventListeners, "listeners of /api/v1/events at once")
	f.String("payload-cache", mib(d.PayloadCache), "payloads held in memory for their dispatch; the others are read from the journal (bytes, KiB, MiB, GiB)")
	f.String("max-receive-buffer", mib(d.MaxReceiveBuffer), "received messages held at once, all connections together (default: an eighth of the memory: the machine's, the container's limit or GOMEMLIMIT, the least)")
	f.String("max-send-buffer", mib(d.MaxSendBuffer), "bytes queued for sending: payloads are read only below it; one connection over it is dropped")
	f.Duration("retain-done", d.ResultTTL, "keep each done job, listable with its result, this long (0 = deleted when done)")
	f.Duration("result-ttl", d.ResultTTL, "the same as --retain-done (its former name)")
	f.Duration("drain-timeout", d.DrainTimeout, "at SIGTERM, wait this long for the jobs in flight before stopping (0 = do not wait)")
	f.Duration("retry-backoff", d.RetryBackoff, "a FAILed job runs again after this, doubled at each further attempt")
	f.Duration("max-retry-backoff", d.MaxRetryBackoff, "the longest a FAILed job waits before it runs again")
	f.String("publisher-incoming", d.PublisherIncoming, "ROUTER endpoint taking PUBLISH only, EventMQ's emq-pubsub address (\"\" = not bound; the frontend takes PUBLISH too)")
	f.String("publisher-outgoing", d.PublisherOutgoing, "PUB endpoint ZeroMQ SUB sockets connect to (\"\" = pub/sub off)")
	f.Int("subscriber-hwm", d.SubscriberHWM, "published messages queued per subscriber; past it its messages are dropped (counted)")
	f.String("publisher-buffer", mib(d.PublisherBuffer), "bytes queued for every subscriber together (one may hold a quarter)")
	f.Int("max-subscribers", d.MaxSubscribers, "subscriber connections; more are closed at once")
	f.Bool("publisher-last-value", false, "send a new subscription the latest message of each topic it matches (a last-value cache)")
	f.Int("last-value-topics", d.LastValueTopics, "topics the last-value cache holds")
	f.String("last-value-bytes", mib(d.LastValueBytes), "bytes the last-value cache holds")
	f.Bool("forward-schedules", false, "pass SCHEDULE and UNSCHEDULE to an EventMQ scheduler peer instead of keeping schedules in the journal (EventMQ's split)")
	f.String("curve-secret-key-file", "", "the broker's CURVE secret key (one Z85 line, emq keygen); with --curve-clients the eMQP endpoints speak CURVE")
	f.String("curve-clients", "", "the CURVE peers allowed: a line each, PUBLICKEY ROLES (client,worker,subscriber); re-read on SIGHUP")
	f.String("plain-users", "", "PLAIN users allowed: a line each, USER:BCRYPT-HASH:ROLES (emq passwd); re-read on SIGHUP. PLAIN sends passwords in clear: for networks you trust")
	f.Bool("allow-anonymous", false, "let eMQP endpoints bind non-loopback addresses with neither CURVE nor PLAIN: anyone who reaches them may send and take jobs")
	addEtcdFlags(f, "keep the journal in etcd, at these client URLs (comma-separated): brokers on the same endpoints and prefix form a group, one leader and standbys (instead of --data-dir)")
	f.Duration("leader-ttl", group.DefaultOptions().LeaderTTL, "with --etcd-endpoints: the leader's lease, how long a group goes without a leader when it dies (whole seconds)")
	f.String("etcd-name", "", "with --etcd-endpoints: this broker's name in the group (default host:pid)")
	f.Bool("cold-standby", false, "with --etcd-endpoints: a standby keeps no copy of the journal's keys (by default it follows the leader's writes, holding what the leader holds in memory, about 330 bytes a stored job, so that a takeover need not read the journal: with 1,000,000 jobs stored that read takes seconds)")
	f.Duration("etcd-hold-completes", group.DefaultOptions().HoldCompletes, "with --etcd-endpoints: about how long a job's completion with no new job in its commit to take its etcd key may wait for one in the commits after (at most as many as the last commits' new jobs; none while the journal holds workflows), so that one put ends the one job and stores the other (0 = delete at once; until the deletion is written, a failover runs the job again)")
	f.Duration("etcd-gather", group.DefaultOptions().Gather, "with --etcd-endpoints: while several senders' jobs come in less than this apart, a commit waits for the next (up to 4 times this in all), so that senders waiting for their ACKs share commits (0 = commit at once)")
	f.Int("etcd-pipeline", group.DefaultOptions().Pipeline, "with --etcd-endpoints: how many of the journal's commits may be in flight at once (1 to 1024; etcd carries concurrent transactions in one raft round; 1: one after another)")
	f.String("shard", "", "with --etcd-endpoints: the group is this shard of several, and takes jobs only for the queues the placement puts on it (emq shards)")
	placementFlags(f)
	f.String("log-level", "info", "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		file, _ := cmd.Flags().GetString("config")
		c, err := loadConfig(cmd.Flags(), file)
		if err != nil {
			return err
		}
		opts, err := brokerOptions(c)
		if err != nil {
			return err
		}
		level, err := logLevel(c)
		if err != nil {
			return err
		}
		opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
		tp, stopTracing, err := tracerProvider("emq-broker", opts.Logger)
		if err != nil {
			return err
		}
		defer stopTracing()
		opts.TracerProvider = tp
		aopts, err := adminOptions(c, opts)
		if err != nil {
			return err
		}
		if c.str("etcd-endpoints") != "" {
			g, err := groupSetup(c, &opts)
			if err != nil {
				return err
			}
			grp, err := group.New(opts, aopts, g)
			if err != nil {
				return err
			}
			return runUntilSignalled(grp, opts.Logger)
		}
		srv, err := admin.New(aopts)
		if err != nil {
			return err
		}
		opts.Observer = srv.Observer()
		b, err := broker.New(opts)
		if err != nil {
			return err
		}
		srv.Serve(b)
		if err := srv.Start(); err != nil {
			b.Close()
			return err
		}
		defer srv.Close()
		return runUntilSignalled(b, opts.Logger)
	}
	return cmd
}

// runner is a Broker, or a Group of brokers.
type runner interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	ReloadCredentials() error
}

// addEtcdFlags adds the flags that reach a group's etcd.
func addEtcdFlags(f *pflag.FlagSet, endpointsHelp string) {
	d := group.DefaultOptions()
	f.String("etcd-endpoints", "", endpointsHelp)
	f.String("etcd-prefix", d.Prefix, "with --etcd-endpoints: the group's keys in etcd")
	f.String("etcd-user", "", "with --etcd-endpoints: etcd user (with --etcd-password)")
	f.String("etcd-password", "", "with --etcd-endpoints: etcd password")
	f.String("etcd-cacert", "", "with --etcd-endpoints: CA certificate (PEM) that etcd's certificates are checked with (https endpoints)")
	f.String("etcd-cert", "", "with --etcd-endpoints: client certificate (PEM) for etcd, with --etcd-key")
	f.String("etcd-key", "", "with --etcd-endpoints: the private key (PEM) of --etcd-cert")
	f.Duration("etcd-timeout", d.Timeout, "with --etcd-endpoints: the longest wait for one etcd request; an etcd member that stops answering stalls the group this long (shorter: sooner past a dead member; too short for etcd's slowest commits: needless failovers)")
}

// groupSetup reads a group broker's etcd flags, gives opts the journal
// on etcd's job size limit unless max-job-size is set, and checks both
// as group.New will.
func groupSetup(c *config, opts *broker.Options) (group.Options, error) {
	g, err := groupOptions(c)
	if err != nil {
		return g, err
	}
	if !c.v.IsSet("max-job-size") {
		opts.MaxJobSize = etcdstore.DefaultOptions().MaxJobSize
	}
	return g, g.ValidateFor(*opts)
}

// groupOptions reads the etcd flags; errors name the key.
func groupOptions(c *config) (group.Options, error) {
	g := group.DefaultOptions()
	if c.v.IsSet("data-dir") {
		return g, fmt.Errorf("data-dir and etcd-endpoints: the journal is in one or the other; give one")
	}
	g.Endpoints, g.Prefix = c.list("etcd-endpoints"), c.str("etcd-prefix")
	if c.v.IsSet("shard") {
		g.Shard, g.PlacementEndpoints, g.PlacementPrefix = c.str("shard"), c.list("placement-endpoints"), c.str("placement-prefix")
	}
	g.Username, g.Password, g.Name = c.str("etcd-user"), c.str("etcd-password"), c.str("etcd-name")
	if c.v.IsSet("etcd-timeout") {
		d, err := c.duration("etcd-timeout")
		if err != nil {
			return g, err
		}
		g.Timeout = d
	}
	if c.v.IsSet("cold-standby") {
		b, err := c.boolean("cold-standby")
		if err != nil {
			return g, err
		}
		g.ColdStandby = b
	}
	if c.v.IsSet("etcd-hold-completes") {
		d, err := c.duration("etcd-hold-completes")
		if err != nil {
			return g, err
		}
		g.HoldCompletes = d
	}
	if c.v.IsSet("etcd-pipeline") {
		n, err := c.integer("etcd-pipeline")
		if err != nil {
			return g, err
		}
		g.Pipeline = n
	}
	if c.v.IsSet("etcd-gather") {
		d, err := c.duration("etcd-gather")
		if err != nil {
			return g, err
		}
		g.Gather = d
	}
	if c.v.IsSet("leader-ttl") {
		ttl, err := c.duration("leader-ttl")
		if err != nil {
			return g, err
		}
		g.LeaderTTL = ttl
	}
	cacert, cert, key := c.str("etcd-cacert"), c.str("etcd-cert"), c.str("etcd-key")
	if cacert == "" && cert == "" && key == "" {
		return g, nil
	}
	if (cert == "") != (key == "") {
		return g, fmt.Errorf("etcd-cert and etcd-key: give both or neither")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return g, fmt.Errorf("etcd-cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return g, fmt.Errorf("etcd-cacert %s: no PEM certificate in it", cacert)
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return g, fmt.Errorf("etcd-cert %s, etcd-key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	g.TLS = cfg
	return g, nil
}

// mib writes a default size as the flags read it.
func mib(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }

// runUntilSignalled runs b until SIGTERM or SIGINT, which start its drain;
// a second one stops it at once. SIGHUP re-reads the CURVE clients and
// PLAIN users. Under systemd it says when b is ready (notify.go),
// reloading and stopping, and pings the watchdog.
func runUntilSignalled(b runner, log *slog.Logger) error {
	n := sdnotify.New(log)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer func() { signal.Stop(hups); close(hups) }()
	go func() {
		for range hups {
			n.Reload("SIGHUP: re-reading the CURVE clients and PLAIN users", func() string {
				if err := b.ReloadCredentials(); err != nil {
					log.Error("SIGHUP: credentials not re-read; the old ones stay", "err", err)
					return fmt.Sprintf("SIGHUP: the credentials were not re-read, the old ones stay: %v", err)
				}
				return ""
			})
		}
	}()
	hurry, cut := context.WithCancel(context.Background())
	defer cut()
	ctx, ran := context.WithCancel(context.Background())
	defer ran()
	go whenReady(n, b, ctx.Done())
	go n.Watchdog(ctx)
	go func() {
		select {
		case sig := <-sigs:
			log.Info("signal received: draining; send it again to stop at once", "signal", sig.String())
			n.Stopping("draining: no new jobs, the jobs in flight may finish; a second SIGTERM stops at once")
			go b.Shutdown(hurry)
		case <-ctx.Done():
			return
		}
		select {
		case <-sigs:
			cut()
		case <-ctx.Done():
		}
	}()
	return b.Run(context.Background())
}

// adminOptions reads the admin listener's options from c, with the
// limits o shares with it; errors name the key.
func adminOptions(c *config, o broker.Options) (admin.Options, error) {
	a := admin.DefaultOptions()
	a.Addr, a.Token, a.ReadToken = c.str("admin"), c.str("admin-token"), c.str("admin-read-token")
	a.TLSCert, a.TLSKey = c.str("admin-tls-cert"), c.str("admin-tls-key")
	a.AllowedHosts, a.AllowedOrigins = c.list("admin-allowed-hosts"), c.list("admin-allowed-origins")
	a.MaxStreams, a.MaxBodyBytes, a.Logger = o.MaxEventListeners, 2*int64(o.MaxJobSize), o.Logger
	return a, a.Validate()
}

// scheduleClock is the broker's schedules' clock; nil, the wall clock.
// The fault tests step it in a child broker (there is no stepping one
// process's real wall clock).
var scheduleClock func() time.Time

// brokerOptions reads the broker's options from c; errors name the key.
func brokerOptions(c *config) (broker.Options, error) {
	o := broker.DefaultOptions()
	o.Now = scheduleClock
	if c.str("shard") != "" && c.str("etcd-endpoints") == "" {
		return o, fmt.Errorf("shard: a shard is a replicated group; give --etcd-endpoints too")
	}
	o.Frontend, o.Backend, o.DataDir = c.str("frontend"), c.str("backend"), c.str("data-dir")
	o.OpenJournal = boltjournal.Open // a group's broker opens its own, in etcd
	o.CurveSecretKeyFile, o.CurveClients, o.PlainUsers = c.str("curve-secret-key-file"), c.str("curve-clients"), c.str("plain-users")
	var err error
	if o.AllowAnonymous, err = c.boolean("allow-anonymous"); err != nil {
		return o, err
	}
	if o.HeartbeatInterval, err = c.duration("heartbeat-interval"); err != nil {
		return o, err
	}
	if o.HeartbeatTimeout, err = c.duration("heartbeat-timeout"); err != nil {
		return o, err
	}
	if o.OverdueAfter, err = c.duration("overdue-after"); err != nil {
		return o, err
	}
	retain, err := c.duration("retain-done")
	if err != nil {
		return o, err
	}
	ttl, err := c.duration("result-ttl")
	if err != nil {
		return o, err
	}
	if retain != 0 && ttl != 0 && retain != ttl {
		return o, fmt.Errorf("retain-done %v and result-ttl %v: they are one setting (result-ttl is its former name); set one", retain, ttl)
	}
	if o.ResultTTL = ttl; retain != 0 {
		o.ResultTTL = retain
	}
	if o.RetryBackoff, err = c.duration("retry-backoff"); err != nil {
		return o, err
	}
	if o.MaxRetryBackoff, err = c.duration("max-retry-backoff"); err != nil {
		return o, err
	}
	if o.DrainTimeout, err = c.duration("drain-timeout"); err != nil {
		return o, err
	}
	if o.MaxFrameSize, err = c.size("max-frame-size"); err != nil {
		return o, err
	}
	size, err := c.size("max-job-size")
	if err != nil {
		return o, err
	}
	o.MaxJobSize = int(min(size, 1<<31))
	if o.JournalSegmentSize, err = c.size("journal-segment-size"); err != nil {
		return o, err
	}
	if o.JournalMaxLog, err = c.size("journal-max-log"); err != nil {
		return o, err
	}
	if o.JournalRecover, err = c.boolean("journal-recover"); err != nil {
		return o, err
	}
	if o.MaxPending, err = c.integer("max-pending"); err != nil {
		return o, err
	}
	if o.MaxBulk, err = c.integer("max-bulk"); err != nil {
		return o, err
	}
	if o.ForwardSchedules, err = c.boolean("forward-schedules"); err != nil {
		return o, err
	}
	o.PublisherIncoming, o.PublisherOutgoing = c.str("publisher-incoming"), c.str("publisher-outgoing")
	if o.PublisherLastValue, err = c.boolean("publisher-last-value"); err != nil {
		return o, err
	}
	for key, dst := range map[string]*int{"subscriber-hwm": &o.SubscriberHWM, "max-subscribers": &o.MaxSubscribers,
		"last-value-topics": &o.LastValueTopics, "event-buffer": &o.EventBuffer, "max-event-listeners": &o.MaxEventListeners,
		"max-connections": &o.MaxConnections, "max-connections-per-ip": &o.MaxConnectionsPerIP} {
		if *dst, err = c.integer(key); err != nil {
			return o, err
		}
	}
	for key, dst := range map[string]*int64{"payload-cache": &o.PayloadCache,
		"max-receive-buffer": &o.MaxReceiveBuffer, "max-send-buffer": &o.MaxSendBuffer,
		"publisher-buffer": &o.PublisherBuffer, "last-value-bytes": &o.LastValueBytes} {
		if *dst, err = c.size(key); err != nil {
			return o, err
		}
	}
	if o.Queues, err = c.queueDefaults(); err != nil {
		return o, err
	}
	return o, o.Validate()
}
