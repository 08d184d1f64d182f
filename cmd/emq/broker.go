package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/sdnotify"
	"github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
)

func newBrokerCmd() *cobra.Command {
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
	b := &binder{f: f}
	brokerFlags(b, new(broker.DefaultOptions()))
	listenerFlags(b, new(admin.DefaultOptions()))
	etcdFlags(b, new(group.DefaultOptions()), new(etcdFiles), "keep the journal in etcd, at these client URLs (comma-separated): brokers on the same endpoints and prefix form a group, one leader and standbys (instead of --data-dir)")
	memberFlags(b, new(group.DefaultOptions()))
	shardFlags(b, new(shards.DefaultOptions()))
	logLevelFlag(b, new(slog.LevelInfo))
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
			grp, srv, err := newGroup(c, opts, aopts, g)
			if err != nil {
				return err
			}
			if err := srv.Start(); err != nil {
				grp.Close()
				return err
			}
			defer srv.Close()
			return runUntilSignalled(grp, opts.Logger, keyFile(opts.JournalKeys))
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
		return runUntilSignalled(b, opts.Logger, keyFile(opts.JournalKeys))
	}
	return cmd
}

// keyFile is the file k was read from; "" for none.
func keyFile(k *store.Keyring) string {
	if k == nil {
		return ""
	}
	return k.File()
}

// brokerExtra holds what emq broker's flags give that is not one field
// of broker.Options as it is: brokerOptions makes it so.
type brokerExtra struct {
	retainDone, resultTTL time.Duration // one setting under two names
	maxJobSize            int64         // an int in broker.Options
	journalKeys           string        // the file of broker.Options.JournalKeys
}

// brokerFlags declares emq broker's flags that fill o (and x for those
// that need more than a field).
func brokerFlags(b *binder, o *broker.Options) *brokerExtra {
	x := &brokerExtra{retainDone: o.ResultTTL, resultTTL: o.ResultTTL, maxJobSize: int64(o.MaxJobSize)}
	b.str(&o.Frontend, "frontend", "ZeroMQ endpoint for clients")
	b.str(&o.Backend, "backend", "ZeroMQ endpoint for workers")
	b.str(&o.DataDir, "data-dir", "directory of the journal file "+broker.JournalFile)
	b.duration(&o.HeartbeatInterval, "heartbeat-interval", "HEARTBEAT to each worker this often")
	b.duration(&o.HeartbeatTimeout, "heartbeat-timeout", "a worker silent this long is lost and its jobs requeued")
	b.duration(&o.OverdueAfter, "overdue-after", "a job without a timeout held by a worker this long is overdue: an event, emq_jobs_overdue_total, emq jobs why; it runs on (0 = never)")
	b.size(&o.MaxFrameSize, "max-frame-size", "largest frame accepted (bytes, KiB, MiB, GiB)")
	b.size(&x.maxJobSize, "max-job-size", "largest job stored: payload, headers and ids (bytes, KiB, MiB, GiB)")
	b.size(&o.JournalSegmentSize, "journal-segment-size", "size of each write-ahead log segment file beside the journal file (two of them take this much disk at least)")
	b.size(&o.JournalMaxLog, "journal-max-log", "what the log may hold that the journal file does not yet: disk, and how far the checkpoint may lag (memory holds where each value lies, not payloads); past it REQUESTs get ERROR unavailable until the checkpoint catches up")
	b.boolean(&o.JournalRecover, "journal-recover", "open a journal whose log is damaged in the middle: keep every good record, log what is lost (emq journal check names it first)")
	journalKeysFlag(b, &x.journalKeys)
	b.integer(&o.MaxPending, "max-pending", "jobs per queue beyond which REQUESTs get ERROR queue_full (0 = no limit)")
	b.integer(&o.MaxBulk, "max-bulk", "most jobs in one BULK (emq send --bulk, client.SendBulk); more get ERROR too_large")
	b.integer(&o.MaxConnections, "max-connections", "connections of every eMQP and pub/sub endpoint together, handshakes included (0 = no bound; the default is 3/4 of the fd limit)")
	b.integer(&o.MaxConnectionsPerIP, "max-connections-per-ip", "connections from one IP address (0 = no bound)")
	b.integer(&o.EventBuffer, "event-buffer", "events a listener of /api/v1/events may fall behind before it is dropped")
	b.integer(&o.MaxEventListeners, "max-event-listeners", "listeners of /api/v1/events at once")
	b.size(&o.PayloadCache, "payload-cache", "payloads held in memory for their dispatch; the others are read from the journal (bytes, KiB, MiB, GiB)")
	b.size(&o.MaxReceiveBuffer, "max-receive-buffer", "received messages held at once, all connections together (default: an eighth of the memory: the machine's, the container's limit or GOMEMLIMIT, the least)")
	b.size(&o.MaxSendBuffer, "max-send-buffer", "bytes queued for sending: payloads are read only below it; one connection over it is dropped")
	b.duration(&x.retainDone, "retain-done", "keep each done job, listable with its result, this long (0 = deleted when done)")
	b.duration(&x.resultTTL, "result-ttl", "the same as --retain-done (its former name)")
	b.duration(&o.DrainTimeout, "drain-timeout", "at SIGTERM, wait this long for the jobs in flight before stopping (0 = do not wait)")
	b.duration(&o.RetryBackoff, "retry-backoff", "a FAILed job runs again after this, doubled at each further attempt")
	b.duration(&o.MaxRetryBackoff, "max-retry-backoff", "the longest a FAILed job waits before it runs again")
	b.str(&o.PublisherIncoming, "publisher-incoming", "ROUTER endpoint taking PUBLISH only, EventMQ's emq-pubsub address (\"\" = not bound; the frontend takes PUBLISH too)")
	b.str(&o.PublisherOutgoing, "publisher-outgoing", "PUB endpoint ZeroMQ SUB sockets connect to (\"\" = pub/sub off)")
	b.integer(&o.SubscriberHWM, "subscriber-hwm", "published messages queued per subscriber; past it its messages are dropped (counted)")
	b.size(&o.PublisherBuffer, "publisher-buffer", "bytes queued for every subscriber together (one may hold a quarter)")
	b.integer(&o.MaxSubscribers, "max-subscribers", "subscriber connections; more are closed at once")
	b.boolean(&o.PublisherLastValue, "publisher-last-value", "send a new subscription the latest message of each topic it matches (a last-value cache)")
	b.integer(&o.LastValueTopics, "last-value-topics", "topics the last-value cache holds")
	b.size(&o.LastValueBytes, "last-value-bytes", "bytes the last-value cache holds")
	b.boolean(&o.ForwardSchedules, "forward-schedules", "pass SCHEDULE and UNSCHEDULE to an EventMQ scheduler peer instead of keeping schedules in the journal (EventMQ's split)")
	b.str(&o.CurveSecretKeyFile, "curve-secret-key-file", "the broker's CURVE secret key (one Z85 line, emq keygen); with --curve-clients the eMQP endpoints speak CURVE")
	b.str(&o.CurveClients, "curve-clients", "the CURVE peers allowed: a line each, PUBLICKEY ROLES (client,worker,subscriber); re-read on SIGHUP")
	b.str(&o.PlainUsers, "plain-users", "PLAIN users allowed: a line each, USER:BCRYPT-HASH:ROLES (emq passwd); re-read on SIGHUP. PLAIN sends passwords in clear: for networks you trust")
	b.boolean(&o.AllowAnonymous, "allow-anonymous", "let eMQP endpoints bind non-loopback addresses with neither CURVE nor PLAIN: anyone who reaches them may send and take jobs")
	return x
}

// listenerFlags declares emq broker's flags of its admin listener.
func listenerFlags(b *binder, a *admin.Options) {
	b.str(&a.Addr, "admin", `HTTP address of the admin API, /metrics, /healthz and /readyz ("" = none)`)
	b.str(&a.Token, "admin-token", "require this Bearer token on every admin request (needed for a non-loopback --admin)")
	b.str(&a.ReadToken, "admin-read-token", "a second Bearer token that may read everything and change nothing (dashboards, monitoring)")
	b.str(&a.ProducerToken, "admin-producer-token", "a Bearer token that may only send jobs (POST /api/v1/queues/QUEUE/jobs) and read their results: for programs that enqueue over HTTP (docs/http.md)")
	b.maybe(&a.ShowPayloads, "admin-show-payloads", "show payloads and results to the read-only token too (true), or to nobody but the full admin token (false); "+
		"unset: with no admin token set, to every caller of the loopback listener (docs/security.md, Who sees payloads)")
	b.duration(&a.KeepResult, "admin-keep-result", "how long a job sent over HTTP keeps its result for its sender when it names no keep_result (header keep-result); 0: as --retain-done says")
	b.integer(&a.MaxResultWaits, "admin-max-result-waits", "result requests (GET /api/v1/jobs/MSGID/result?wait=) that may wait at once; more get 503")
	b.str(&a.TLSCert, "admin-tls-cert", "serve the admin API over HTTPS with this certificate (PEM; with --admin-tls-key)")
	b.str(&a.TLSKey, "admin-tls-key", "the private key (PEM) of --admin-tls-cert")
	b.list(&a.AllowedHosts, "admin-allowed-hosts", "host names, comma-separated, that admin requests may carry besides loopback and the listener's address (a name it is reached by)")
	b.list(&a.AllowedOrigins, "admin-allowed-origins", "origins (scheme://host[:port]), comma-separated, whose web pages may change things through the admin API besides its own")
}

// etcdFiles are the TLS files the etcd flags name.
type etcdFiles struct{ cacert, cert, key string }

// etcdFlags declares the flags that reach a group's etcd.
func etcdFlags(b *binder, g *group.Options, files *etcdFiles, endpointsHelp string) {
	b.list(&g.Endpoints, "etcd-endpoints", endpointsHelp)
	b.str(&g.Prefix, "etcd-prefix", "with --etcd-endpoints: the group's keys in etcd")
	b.str(&g.Username, "etcd-user", "with --etcd-endpoints: etcd user (with --etcd-password)")
	b.str(&g.Password, "etcd-password", "with --etcd-endpoints: etcd password")
	b.str(&files.cacert, "etcd-cacert", "with --etcd-endpoints: CA certificate (PEM) that etcd's certificates are checked with (https endpoints)")
	b.str(&files.cert, "etcd-cert", "with --etcd-endpoints: client certificate (PEM) for etcd, with --etcd-key")
	b.str(&files.key, "etcd-key", "with --etcd-endpoints: the private key (PEM) of --etcd-cert")
	b.duration(&g.Timeout, "etcd-timeout", "with --etcd-endpoints: the longest wait for one etcd request; an etcd member that stops answering stalls the group this long (shorter: sooner past a dead member; too short for etcd's slowest commits: needless failovers)")
}

// addEtcdFlags adds the flags that reach a group's etcd.
func addEtcdFlags(f *pflag.FlagSet, endpointsHelp string) {
	etcdFlags(&binder{f: f}, new(group.DefaultOptions()), new(etcdFiles), endpointsHelp)
}

// memberFlags declares emq broker's flags of a group's member.
func memberFlags(b *binder, g *group.Options) {
	b.duration(&g.LeaderTTL, "leader-ttl", "with --etcd-endpoints: the leader's lease, how long a group goes without a leader when it dies (whole seconds)")
	b.str(&g.Name, "etcd-name", "with --etcd-endpoints: this broker's name in the group (default host:pid)")
	b.boolean(&g.ColdStandby, "cold-standby", "with --etcd-endpoints: a standby keeps no copy of the journal's keys (by default it follows the leader's writes, holding what the leader holds in memory, about 330 bytes a stored job, so that a takeover need not read the journal: with 1,000,000 jobs stored that read takes seconds)")
	b.duration(&g.HoldCompletes, "etcd-hold-completes", "with --etcd-endpoints: about how long a job's completion with no new job in its commit to take its etcd key may wait for one in the commits after (at most as many as the last commits' new jobs; none while the journal holds workflows), so that one put ends the one job and stores the other (0 = delete at once; until the deletion is written, a failover runs the job again)")
	b.duration(&g.Gather, "etcd-gather", "with --etcd-endpoints: while several senders' jobs come in less than this apart, a commit waits for the next (up to 4 times this in all), so that senders waiting for their ACKs share commits (0 = commit at once)")
	b.integer(&g.Pipeline, "etcd-pipeline", "with --etcd-endpoints: how many of the journal's commits may be in flight at once (1 to 1024; etcd carries concurrent transactions in one raft round; 1: one after another)")
}

// logLevelFlag declares --log-level.
func logLevelFlag(b *binder, level *slog.Level) {
	b.level(level, "log-level", "debug, info, warn or error")
}

// runner is a Broker, or a Group of brokers.
type runner interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	ReloadCredentials() error
	ReloadJournalKeys(k *store.Keyring) error
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

// groupOptions reads the etcd flags, and emq broker's of a group's
// member; errors name the key.
func groupOptions(c *config) (group.Options, error) {
	g := group.DefaultOptions()
	if c.v.IsSet("data-dir") {
		return g, fmt.Errorf("data-dir and etcd-endpoints: the journal is in one or the other; give one")
	}
	var files etcdFiles
	b := reader()
	etcdFlags(b, &g, &files, "")
	memberFlags(b, &g)
	if err := b.apply(c); err != nil {
		return g, err
	}
	cacert, cert, key := files.cacert, files.cert, files.key
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

// stopRequests asks runUntilSignalled for a graceful stop, as SIGTERM
// does (the admin listener's Shutdown: emq-cli's DISCONNECT).
var stopRequests = make(chan struct{}, 1)

// requestStop asks for a graceful stop; once is enough.
func requestStop() {
	select {
	case stopRequests <- struct{}{}:
	default:
	}
}

// runUntilSignalled runs b until SIGTERM or SIGINT, which start its drain;
// a second one stops it at once. SIGHUP re-reads the CURVE clients and
// PLAIN users, and the journal's keys from keyFile (if the broker was
// started with one). Under systemd it says when b is ready (notify.go),
// reloading and stopping, and pings the watchdog.
func runUntilSignalled(b runner, log *slog.Logger, keyFile string) error {
	n := sdnotify.New(log)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer func() { signal.Stop(hups); close(hups) }()
	reloading := "SIGHUP: re-reading the CURVE clients and PLAIN users"
	if keyFile != "" {
		reloading += ", and the journal keys"
	}
	go func() {
		for range hups {
			n.Reload(reloading, func() string {
				var failed []string
				if err := b.ReloadCredentials(); err != nil {
					log.Error("SIGHUP: credentials not re-read; the old ones stay", "err", err)
					failed = append(failed, fmt.Sprintf("the credentials were not re-read, the old ones stay: %v", err))
				}
				if err := reloadJournalKeys(b, keyFile); err != nil {
					log.Error("SIGHUP: journal keys refused; the old ones stay", "file", keyFile, "err", err)
					failed = append(failed, fmt.Sprintf("the journal keys were refused, the old ones stay: %v", err))
				}
				if len(failed) == 0 {
					return ""
				}
				return "SIGHUP: " + strings.Join(failed, "; ")
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
		case <-stopRequests:
			log.Info("a graceful stop was asked (emq-cli's DISCONNECT): draining; SIGTERM stops at once")
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
	b := reader()
	listenerFlags(b, &a)
	if err := b.apply(c); err != nil {
		return a, err
	}
	a.MaxStreams, a.MaxBodyBytes, a.Logger = o.MaxEventListeners, 2*int64(o.MaxJobSize), o.Logger
	a.Shutdown = requestStop
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
	o.OpenJournal = boltjournal.Open // a group's broker opens its own, in etcd
	b := reader()
	x := brokerFlags(b, &o)
	if err := b.apply(c); err != nil {
		return o, err
	}
	if x.retainDone != 0 && x.resultTTL != 0 && x.retainDone != x.resultTTL {
		return o, fmt.Errorf("retain-done %v and result-ttl %v: they are one setting (result-ttl is its former name); set one", x.retainDone, x.resultTTL)
	}
	if o.ResultTTL = x.resultTTL; x.retainDone != 0 {
		o.ResultTTL = x.retainDone
	}
	o.MaxJobSize = int(min(x.maxJobSize, 1<<31))
	var err error
	if o.JournalKeys, err = readJournalKeys(c, x.journalKeys); err != nil {
		return o, err
	}
	if o.Queues, err = c.queueDefaults(); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// journalKeysFlag declares --journal-keys, of the broker and of every
// tool that opens a journal.
func journalKeysFlag(b *binder, file *string) {
	b.str(file, "journal-keys", "encrypt the journal at rest with these keys: a file of lines NAME BASE64 (emq keygen --journal NAME), the first encrypts, all decrypt; a journal encrypted before opens only with every key it names; the broker re-reads it on SIGHUP (docs/security.md)")
}

// reloadJournalKeys re-reads keyFile and gives b its keys (SIGHUP); a
// broker started without one keeps none.
func reloadJournalKeys(b runner, keyFile string) error {
	if keyFile == "" {
		return nil
	}
	k, err := store.ReadKeyring(keyFile)
	if err != nil {
		return err
	}
	return b.ReloadJournalKeys(k)
}

// readJournalKeys reads the key file named (nil for none).
func readJournalKeys(c *config, file string) (*store.Keyring, error) {
	if file == "" {
		return nil, nil
	}
	return store.ReadKeyring(file)
}
