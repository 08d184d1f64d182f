package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the broker's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	commitTime   prometheus.Histogram
	commitBatch  prometheus.Histogram
	replay       prometheus.Gauge
	fireLateness prometheus.Histogram
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{
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
	}
	m.reg.MustRegister(m.commitTime, m.commitBatch, m.replay, m.fireLateness, &stateCollector{b}, pubCollector{b},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if g := b.opts.Group; g != nil {
		m.reg.MustRegister(g.collectors()...)
	}
	for _, c := range Counters {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.Metric, Help: c.Help},
			func() float64 { return float64(c.Value(&b.stats)) }))
	}
	return m
}

// observeCommit is the journal's OnCommit hook.
func (m *metrics) observeCommit(writes int, took time.Duration) {
	m.commitTime.Observe(took.Seconds())
	m.commitBatch.Observe(float64(writes))
}

// stateCollector reports what the loop holds, read on the loop at scrape
// time, and the ERRORs sent by code.
type stateCollector struct{ b *Broker }

var (
	descPending   = prometheus.NewDesc("emq_queue_pending_jobs", "Jobs waiting for a worker.", []string{"queue"}, nil)
	descDelayed   = prometheus.NewDesc("emq_queue_delayed_jobs", "Jobs waiting for their time (delay, retry backoff).", []string{"queue"}, nil)
	descInFlight  = prometheus.NewDesc("emq_queue_inflight_jobs", "Jobs held by workers.", []string{"queue"}, nil)
	descOldest    = prometheus.NewDesc("emq_queue_oldest_job_age_seconds", "Age of the oldest job not done.", []string{"queue"}, nil)
	descQWorkers  = prometheus.NewDesc("emq_queue_workers", "Workers serving the queue.", []string{"queue"}, nil)
	descQPaused   = prometheus.NewDesc("emq_queue_paused", "1 when an operator paused the queue: it stores jobs, dispatches none.", []string{"queue"}, nil)
	descQConc     = prometheus.NewDesc("emq_queue_concurrency_limit", "Most jobs of the queue in flight at once; 0 = no limit.", []string{"queue"}, nil)
	descConns     = prometheus.NewDesc("emq_connections", "Connections of every eMQP and pub/sub endpoint, handshakes included (max-connections).", nil, nil)
	descRefused   = prometheus.NewDesc("emq_connections_refused_total", "Connections closed at once: max-connections or max-connections-per-ip reached.", nil, nil)
	descHandshake = prometheus.NewDesc("emq_handshakes_failed_total", "Connections that ended in their ZMTP handshake: timed out, closed, not ZMTP.", nil, nil)
	descListeners = prometheus.NewDesc("emq_event_listeners", "Listeners of the event stream (/api/v1/events).", nil, nil)
	descQRate     = prometheus.NewDesc("emq_queue_rate_limit", "Most dispatches of the queue a second; 0 = no limit.", []string{"queue"}, nil)
	descWorkers   = prometheus.NewDesc("emq_workers", "Connected workers.", nil, nil)
	descScheds    = prometheus.NewDesc("emq_schedulers", "Connected schedulers (peers that SCHEDULEs are passed to).", nil, nil)
	descFreeSlots = prometheus.NewDesc("emq_worker_free_slots", "Slots offered by workers (READY) and not used.", nil, nil)
	descErrors    = prometheus.NewDesc("emq_"+ErrorsName+"_total", "ERRORs sent to peers, by code.", []string{"code"}, nil)
	descCache     = prometheus.NewDesc("emq_payload_cache_bytes", "Bytes of payloads held in memory for dispatch (payload-cache).", nil, nil)
	descReceived  = prometheus.NewDesc("emq_receive_buffer_bytes", "Bytes of received messages held (max-receive-buffer).", nil, nil)
	descSending   = prometheus.NewDesc("emq_send_queue_bytes", "Bytes queued for sending, all connections together (max-send-buffer).", nil, nil)
	descSchedules = prometheus.NewDesc("emq_schedules", "Schedules the broker keeps, by state.", []string{"state"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descDelayed, descInFlight, descOldest, descQWorkers, descQPaused, descQConc, descQRate, descListeners, descConns, descRefused, descHandshake, descWorkers, descScheds, descFreeSlots, descErrors, descCache, descReceived, descSending, descSchedules} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, code := range ErrorCodes {
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.b.stats.Errors(code)), code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	queues, err := c.b.Queues(ctx)
	if err != nil {
		return
	}
	for _, q := range queues {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(q.Pending), q.Name)
		ch <- prometheus.MustNewConstMetric(descDelayed, prometheus.GaugeValue, float64(q.Delayed), q.Name)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(q.InFlight), q.Name)
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, q.OldestAge, q.Name)
		ch <- prometheus.MustNewConstMetric(descQWorkers, prometheus.GaugeValue, float64(q.Workers), q.Name)
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(descQPaused, prometheus.GaugeValue, paused, q.Name)
		ch <- prometheus.MustNewConstMetric(descQConc, prometheus.GaugeValue, float64(q.Concurrency), q.Name)
		ch <- prometheus.MustNewConstMetric(descQRate, prometheus.GaugeValue, q.Rate, q.Name)
	}
	ch <- prometheus.MustNewConstMetric(descListeners, prometheus.GaugeValue, float64(c.b.listenerCount.Load()))
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(c.b.conns.Connections()))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.b.conns.Refused()))
	ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.CounterValue, float64(c.b.conns.HandshakesFailed()))
	workers, err := c.b.Workers(ctx)
	if err != nil {
		return
	}
	free := 0
	for _, w := range workers {
		free += w.FreeSlots
	}
	ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(len(workers)))
	ch <- prometheus.MustNewConstMetric(descFreeSlots, prometheus.GaugeValue, float64(free))
	var schedulers, active, paused int
	var cached, sending int64
	if c.b.onLoop(ctx, func() {
		schedulers, cached = len(c.b.schedulers), c.b.cached
		sending = c.b.routers[frontend].QueuedBytes() + c.b.routers[backend].QueuedBytes()
		for _, s := range c.b.scheds {
			if s.paused {
				paused++
			} else {
				active++
			}
		}
	}) == nil {
		ch <- prometheus.MustNewConstMetric(descScheds, prometheus.GaugeValue, float64(schedulers))
		ch <- prometheus.MustNewConstMetric(descSchedules, prometheus.GaugeValue, float64(active), "active")
		ch <- prometheus.MustNewConstMetric(descSchedules, prometheus.GaugeValue, float64(paused), "paused")
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.GaugeValue, float64(cached))
		ch <- prometheus.MustNewConstMetric(descSending, prometheus.GaugeValue, float64(sending))
	}
	ch <- prometheus.MustNewConstMetric(descReceived, prometheus.GaugeValue, float64(c.b.budget.Used()))
}
