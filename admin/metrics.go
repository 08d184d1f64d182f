package admin

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
)

// Metrics are the admin listener's Prometheus metrics (GET /metrics), in
// a registry of their own: what the broker served holds and counts, read
// at scrape time through its named API, and the figures it observes as
// they happen (Metrics is its broker.Observer).
type Metrics struct {
	reg          *prometheus.Registry
	commitTime   prometheus.Histogram
	commitBatch  prometheus.Histogram
	replay       prometheus.Gauge
	fireLateness prometheus.Histogram
	ackTime      prometheus.Histogram
	payloadReads *prometheus.CounterVec
}

var _ broker.Observer = (*Metrics)(nil)

func newMetrics(s *Server) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "emq_journal_commit_duration_seconds",
			Help:    "Time of one journal commit (group of writes), fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "emq_journal_commit_writes",
			Help:    "Writes (appends, deletes, ...) in one journal commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		replay: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "emq_replay_duration_seconds",
			Help: "Time the last start-up took to load the journal.",
		}),
		fireLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "emq_schedule_fire_lateness_seconds",
			Help:    "How long after its due time a schedule's fire was made (catch-up fires included).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20),
		}),
		ackTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "emq_request_ack_duration_seconds",
			Help:    "From a REQUEST read to its ACK sent: the journal's commit and the broker's turn.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		payloadReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emq_payload_reads_total",
			Help: "Payloads and results handed out by the admin API, by the role that read them (admin, read, producer, no token).",
		}, []string{"role"}),
	}
	for _, role := range []string{"admin", "read", "producer", "no token"} {
		m.payloadReads.WithLabelValues(role)
	}
	m.reg.MustRegister(m.commitTime, m.commitBatch, m.replay, m.fireLateness, m.ackTime, m.payloadReads, brokerCollector{s}, serverCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(s.opts.Collectors...)
	return m
}

// Committed implements broker.Observer.
func (m *Metrics) Committed(writes int, took time.Duration) {
	m.commitTime.Observe(took.Seconds())
	m.commitBatch.Observe(float64(writes))
}

// Replayed implements broker.Observer.
func (m *Metrics) Replayed(took time.Duration) { m.replay.Set(took.Seconds()) }

// Fired implements broker.Observer.
func (m *Metrics) Fired(late time.Duration) { m.fireLateness.Observe(late.Seconds()) }

// Acked implements broker.Observer.
func (m *Metrics) Acked(took time.Duration) { m.ackTime.Observe(took.Seconds()) }

// serverCollector reports what the admin listener knows with or without
// a broker served: whether it is ready (as /readyz), and its place in a
// replicated group.
type serverCollector struct{ s *Server }

var (
	descReady     = prometheus.NewDesc("emq_ready", "1 when the broker serves (as /readyz answers 200), 0 when not: starting, draining, a standby.", nil, nil)
	descLeader    = prometheus.NewDesc("emq_group_leader", "In a replicated group: 1 when this broker leads, 0 when it stands by.", nil, nil)
	descElections = prometheus.NewDesc("emq_group_elections_total", "In a replicated group: leaderships this broker has won.", nil, nil)
)

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descReady
	ch <- descLeader
	ch <- descElections
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	ready := 0.0
	if c.s.ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	if c.s.opts.Group == nil {
		return
	}
	g := c.s.opts.Group()
	leader := 0.0
	if g.Role == group.RoleLeader {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descElections, prometheus.CounterValue, float64(g.Elections))
}

// brokerCollector reports the broker served: its counters, the ERRORs it
// sent by code, what its loop holds (one State at scrape time) and
// pub/sub's figures. With no broker served it reports none of them.
type brokerCollector struct{ s *Server }

var (
	descPending    = prometheus.NewDesc("emq_queue_pending_jobs", "Jobs waiting for a worker.", []string{"queue"}, nil)
	descDelayed    = prometheus.NewDesc("emq_queue_delayed_jobs", "Jobs waiting for their time (delay, retry backoff).", []string{"queue"}, nil)
	descInFlight   = prometheus.NewDesc("emq_queue_inflight_jobs", "Jobs held by workers.", []string{"queue"}, nil)
	descOldest     = prometheus.NewDesc("emq_queue_oldest_job_age_seconds", "Age of the oldest job not done.", []string{"queue"}, nil)
	descQWorkers   = prometheus.NewDesc("emq_queue_workers", "Workers serving the queue.", []string{"queue"}, nil)
	descQPaused    = prometheus.NewDesc("emq_queue_paused", "1 when an operator paused the queue: it stores jobs, dispatches none.", []string{"queue"}, nil)
	descQConc      = prometheus.NewDesc("emq_queue_concurrency_limit", "Most jobs of the queue in flight at once; 0 = no limit.", []string{"queue"}, nil)
	descConns      = prometheus.NewDesc("emq_connections", "Connections of every eMQP and pub/sub endpoint, handshakes included (max-connections).", nil, nil)
	descRefused    = prometheus.NewDesc("emq_connections_refused_total", "Connections closed at once: max-connections or max-connections-per-ip reached.", nil, nil)
	descHandshake  = prometheus.NewDesc("emq_handshakes_failed_total", "Connections that ended in their ZMTP handshake: timed out, closed, not ZMTP.", nil, nil)
	descListeners  = prometheus.NewDesc("emq_event_listeners", "Listeners of the event stream (/api/v1/events).", nil, nil)
	descQRate      = prometheus.NewDesc("emq_queue_rate_limit", "Most dispatches of the queue a second; 0 = no limit.", []string{"queue"}, nil)
	descWorkers    = prometheus.NewDesc("emq_workers", "Connected workers.", nil, nil)
	descScheds     = prometheus.NewDesc("emq_schedulers", "Connected schedulers (peers that SCHEDULEs are passed to).", nil, nil)
	descFreeSlots  = prometheus.NewDesc("emq_worker_free_slots", "Slots offered by workers (READY) and not used.", nil, nil)
	descErrors     = prometheus.NewDesc("emq_protocol_errors_total", "ERRORs sent to peers, by code.", []string{"code"}, nil)
	descCache      = prometheus.NewDesc("emq_payload_cache_bytes", "Bytes of payloads held in memory for dispatch (payload-cache).", nil, nil)
	descReceived   = prometheus.NewDesc("emq_receive_buffer_bytes", "Bytes of received messages held (max-receive-buffer).", nil, nil)
	descReceiveMax = prometheus.NewDesc("emq_receive_buffer_limit_bytes", "The bound of emq_receive_buffer_bytes (max-receive-buffer).", nil, nil)
	descSending    = prometheus.NewDesc("emq_send_queue_bytes", "Bytes queued for sending, all connections together (max-send-buffer).", nil, nil)
	descSchedules  = prometheus.NewDesc("emq_schedules", "Schedules the broker keeps, by state.", []string{"state"}, nil)
)

// Flow control's figures: counts over every tenant and limiter, never a
// series of each (there may be millions of tenants).
var (
	descTenantsBacklog = prometheus.NewDesc("emq_tenants_with_backlog", "Tenants (of every queue) with jobs pending.", nil, nil)
	descTenantsBlocked = prometheus.NewDesc("emq_tenants_blocked", "Tenants at their concurrency or rate: their jobs wait, the others run.", nil, nil)
	descLimitersFull   = prometheus.NewDesc("emq_limiters_full", "Named limiters without room now: at their concurrency, or jobs waiting in their line.", nil, nil)
	descLimiterWaiting = prometheus.NewDesc("emq_limiter_waiting_jobs", "Jobs waiting in named limiters' lines for room.", nil, nil)
)

var (
	descPublished = prometheus.NewDesc("emq_pubsub_published_total", "PUBLISH messages fanned out.", nil, nil)
	descDelivered = prometheus.NewDesc("emq_pubsub_delivered_total", "Published messages written to subscribers.", nil, nil)
	descDropped   = prometheus.NewDesc("emq_pubsub_dropped_total",
		"Published messages a subscriber missed: its queue was full (subscriber-hwm, publisher-buffer), or it went away first.", nil, nil)
	descSubRefused = prometheus.NewDesc("emq_pubsub_refused_connections_total", "Subscriber connections closed at once: max-subscribers reached.", nil, nil)
	descSubs       = prometheus.NewDesc("emq_pubsub_subscribers", "Subscriber connections.", nil, nil)
	descSubPrefix  = prometheus.NewDesc("emq_pubsub_subscriptions", "Topic prefixes subscribed to, every subscriber together.", nil, nil)
	descPubQueued  = prometheus.NewDesc("emq_pubsub_queued_bytes", "Bytes waiting for subscribers (a message counts once per subscriber).", nil, nil)
	descLastValues = prometheus.NewDesc("emq_pubsub_last_value_topics", "Topics in the last-value cache.", nil, nil)
)

// A rekey's progress (emq journal rekey): the one under way, or the last.
var (
	descRekeyRunning  = prometheus.NewDesc("emq_journal_rekey_running", "1 while a rekey seals again, under the journal's first key, what is under older keys (emq journal rekey); 0 when none runs.", nil, nil)
	descRekeyResealed = prometheus.NewDesc("emq_journal_rekey_resealed", "Values the rekey under way, or the last one, sealed again under the first key.", nil, nil)
	descRekeyLeft     = prometheus.NewDesc("emq_journal_rekey_left", "Values the rekey under way, or the last one, still has to seal again (as its last count found them); 0 once it ended.", nil, nil)
	descRekeyRate     = prometheus.NewDesc("emq_journal_rekey_rate", "Values a second the rekey under way, or the last one, is paced to (emq journal rekey --rate).", nil, nil)
)

// counterMetrics are the metric names of the broker's counters
// (broker.Stats.Counters), by counter name.
var counterMetrics = map[string]string{
	"received":                "emq_jobs_received_total",
	"acked":                   "emq_jobs_acked_total",
	"duplicates":              "emq_jobs_duplicate_total",
	"passed_over":             "emq_jobs_passed_over_total",
	"overdue":                 "emq_jobs_overdue_total",
	"dispatched":              "emq_jobs_dispatched_total",
	"replied":                 "emq_jobs_replied_total",
	"failed":                  "emq_jobs_failed_total",
	"retried":                 "emq_jobs_retried_total",
	"timed_out":               "emq_jobs_timed_out_total",
	"dead_lettered":           "emq_jobs_dead_lettered_total",
	"cancelled":               "emq_jobs_cancelled_total",
	"progress":                "emq_job_progress_total",
	"ignored":                 "emq_messages_ignored_total",
	"schedules_forwarded":     "emq_schedules_forwarded_total",
	"schedules_fired":         "emq_schedule_fires_total",
	"event_listeners_dropped": "emq_event_listeners_dropped_total",
	"journal_damaged":         "emq_journal_damaged_total",
	"schedule_fires_skipped":  "emq_schedule_fires_skipped_total",
}

// CounterMetric is the metric name of the broker's counter called name
// (broker.Stats.Counters), "" for none.
func CounterMetric(name string) string { return counterMetrics[name] }

// counterDescs are the broker's counters in their order, each under its
// metric name. A counter without one is a mistake caught at start-up.
var counterDescs = func() []*prometheus.Desc {
	cs := broker.Stats{}.Counters()
	ds := make([]*prometheus.Desc, len(cs))
	for i, c := range cs {
		m := counterMetrics[c.Name]
		if m == "" {
			panic("admin: the broker's counter " + c.Name + " has no metric name (counterMetrics)")
		}
		ds[i] = prometheus.NewDesc(m, c.Help, nil, nil)
	}
	return ds
}()

func (c brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range counterDescs {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descPending, descDelayed, descInFlight, descOldest, descQWorkers, descQPaused, descQConc, descQRate,
		descListeners, descConns, descRefused, descHandshake, descWorkers, descScheds, descFreeSlots, descErrors, descCache, descReceived, descReceiveMax,
		descSending, descSchedules, descTenantsBacklog, descTenantsBlocked, descLimitersFull, descLimiterWaiting, descPublished, descDelivered, descDropped, descSubRefused, descSubs, descSubPrefix, descPubQueued, descLastValues,
		descRekeyRunning, descRekeyResealed, descRekeyLeft, descRekeyRate} {
		ch <- d
	}
}

func (c brokerCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.s.current()
	if t == nil {
		return
	}
	b := t.b
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := b.Stats()
	for i, cn := range st.Counters() {
		counter(counterDescs[i], float64(cn.Value))
	}
	for _, e := range st.ErrorCounts() {
		counter(descErrors, float64(e.Value), e.Name)
	}
	ps := b.PubSub()
	counter(descPublished, float64(ps.Published))
	counter(descDelivered, float64(ps.Delivered))
	counter(descDropped, float64(ps.Dropped))
	counter(descSubRefused, float64(ps.Refused))
	gauge(descSubs, float64(ps.Subscribers))
	gauge(descSubPrefix, float64(ps.Subscriptions))
	gauge(descPubQueued, float64(ps.QueuedBytes))
	gauge(descLastValues, float64(ps.LastValues))
	rk, running := b.RekeyStatus(), 0.0
	if rk.Running {
		running = 1
	}
	gauge(descRekeyRunning, running)
	if rk.Key != "" { // a rekey ran since the journal opened
		gauge(descRekeyResealed, float64(rk.Resealed))
		gauge(descRekeyLeft, float64(rk.Left))
		gauge(descRekeyRate, float64(rk.Rate))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.State(ctx)
	if err != nil { // stopping: what it counted is above
		return
	}
	for _, q := range s.Queues {
		gauge(descPending, float64(q.Pending), q.Name)
		gauge(descDelayed, float64(q.Delayed), q.Name)
		gauge(descInFlight, float64(q.InFlight), q.Name)
		gauge(descOldest, q.OldestAge, q.Name)
		gauge(descQWorkers, float64(q.Workers), q.Name)
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		gauge(descQPaused, paused, q.Name)
		gauge(descQConc, float64(q.Concurrency), q.Name)
		gauge(descQRate, q.Rate, q.Name)
	}
	gauge(descListeners, float64(s.Listeners))
	gauge(descConns, float64(s.Connections))
	counter(descRefused, float64(s.Refused))
	counter(descHandshake, float64(s.HandshakesFailed))
	gauge(descWorkers, float64(s.Workers))
	gauge(descFreeSlots, float64(s.FreeSlots))
	gauge(descScheds, float64(s.Schedulers))
	gauge(descSchedules, float64(s.SchedulesActive), "active")
	gauge(descSchedules, float64(s.SchedulesPaused), "paused")
	gauge(descCache, float64(s.CachedBytes))
	gauge(descSending, float64(s.SendQueueBytes))
	gauge(descReceived, float64(s.ReceivedBytes))
	gauge(descReceiveMax, float64(s.ReceiveLimit))
	if f, err := b.Flow(ctx); err == nil {
		gauge(descTenantsBacklog, float64(f.TenantsWithBacklog))
		gauge(descTenantsBlocked, float64(f.TenantsBlocked))
		gauge(descLimitersFull, float64(f.LimitersFull))
		gauge(descLimiterWaiting, float64(f.LimiterWaiting))
	}
}
