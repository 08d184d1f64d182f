// Package broker is EMQ's broker: it takes jobs from clients over ZeroMQ,
// makes them durable in the journal (package store), hands them to workers
// and forgets them when a worker replies. ../shared/DESIGN.md is the
// specification; this file says how the code carries it out.
//
// # The rooms
//
//	cmd/emq ──▶ admin (HTTP API, dashboard, /metrics)  ──┐
//	        └─▶ group (election, fencing, standby)     ──┴─▶ broker's named API (api.go)
//	                                                            │ query / change
//	                                                            ▼
//	                                                  the loop (this package)
//
// This package is the loop and what it owns. Everyone else (package
// admin, package group, cmd/emq, tests) uses its named API: Queues, QueueLoad,
// Workers, State, InFlight, Job, ListJobs, RetryDead, RemoveJob,
// PurgeQueue, ChangeQueue, the flow calls (ChangeTenant, Tenants,
// SetLimiter, RemoveLimiter, Limiters, Flow, Why), the schedule calls,
// the batch calls (Batch, Batches, OpenBatch, Children), Listen, PayloadRead, Stats,
// Serving; Enqueue and EnqueueBulk send jobs from this process through
// the REQUEST and BULK path (enqueue.go), AwaitJob waits for a job's end.
// Each call that touches loop state posts a closure through query or
// change (api.go) and gets the closure's own result back over a channel,
// so nothing outside the loop holds loop state, and a caller that gives
// up leaves nothing shared behind. The package imports no net/http,
// prometheus or etcd: the admin listener is package admin, fed through
// Options.Observer; the replicated group is package group.
//
// # Who owns what
//
//	clients, workers (DEALER)                      journal (store.Journal)
//	       │   ▲                                      ▲        │
//	 TCP   │   │ one writer goroutine per conn,       │ Append │ done callbacks
//	       ▼   │ bounded queue (internal/zmtp)        │ ...    ▼ (post)
//	┌──────────────────┐   decoded messages   ┌──────────────────────────┐
//	│ reader goroutine │ ───── inbox ───────▶ │ the loop (one goroutine) │
//	│ per connection:  │   (bounded chan:     │ owns jobs, queues, peers,│
//	│ frames → emqp    │    back-pressure)    │ deadlines                │
//	└──────────────────┘                      └──────────────────────────┘
//
// One goroutine, the loop, owns every piece of broker state: the jobs it
// holds in memory, the per-queue FIFOs, the peer table (workers with their
// free slots and held jobs, schedulers), and the deadlines. Nothing else
// touches them, so there are no locks around them. Reader goroutines (one
// per connection) decode frames into emqp messages off the loop and hand
// them over a bounded channel; when the loop falls behind, readers block
// and TCP pushes back on the peers. The journal's goroutine reports each
// durable write through a callback that only posts a closure to the loop
// (an unbounded list, so the journal never blocks): the loop writes
// through loopJournal (journal.go), whose writes run their done on the
// loop, so no callback written here runs elsewhere. Sends never block
// the loop: each connection has its own queue and writer.
//
// The journal is any store.Journal: Options.OpenJournal opens it
// (package boltjournal: the bbolt file in DataDir; package group: etcd),
// so the broker imports no backend. The broker relies on what the
// conformance suite (store/storetest) checks, and on the journal's error
// classes: ErrTooLarge answers too_large, ErrFenced stops the broker,
// anything else on an Append answers unavailable.
//
// # Memory
//
// A job in memory is what dispatch needs (id, queue, headers, times,
// attempts); its payload stays in the journal unless the payload cache
// holds it, and is read when the job goes out (payloads.go). Received
// messages hold room in a receive budget shared by both endpoints
// (internal/zmtp, Budget) until the loop is done with them: a REQUEST
// until its write lands, any other message until it is handled. Payload
// reads wait while the send queues hold MaxSendBuffer. The Memory
// section of docs/operating.md says how to size the limits.
//
// # Deadlines
//
// Everything that must happen at a time is one entry in one heap
// (deadlines.go), and the loop sleeps until the earliest: a delayed job's
// time (delay header, retry backoff), a held job's timeout, a peer's
// heartbeat expiry, the heartbeat to every peer (only while there are
// peers), the sweep of expired results (only with ResultTTL), the end of a
// drain. Nothing is scanned on a tick: a broker holding a million delayed
// jobs and nothing else to do does not wake at all. A peer's expiry is not
// moved for each message it sends; when it comes due, a peer heard since
// gets a new one. Deadlines count on the monotonic clock, so a step of the
// wall clock (NTP, a resumed VM) moves none of them; a job's stored
// not-before time is a wall-clock time, turned into a deadline when the
// job is held. No wait is longer than 100 years.
//
// # A job's life
//
//		REQUEST ─▶ journaling ─fsync─▶ ACK ─▶ pending ─▶ in flight ─REPLY─▶ Complete (deleted)
//		                │                       ▲  ▲          │
//		                └ write failed:         │  └─ delayed ◀┤ FAIL: attempt+1, backoff
//		                  ERROR unavailable     └──────────────┤ lost, timeout: attempt+1, head of queue
//		                                                       └ attempts > retry-count: Bury (dead letters)
//
//	 1. REQUEST: every REQUEST gets exactly one answer, ACK or ERROR,
//	    whoever sends it and whatever state its job is in. It is refused
//	    with ERROR when the broker is stopping (unavailable), the queue
//	    holds MaxPending live jobs (queue_full, nothing journaled), a
//	    known header has a bad value (bad_request, naming the header), or
//	    its unique key is held (duplicate, below). A msgid the broker
//	    holds pending, delayed or in flight is ACKed again; one whose
//	    write is in progress is ACKed (or refused) when the write lands,
//	    once for each REQUEST, the same peer's included (at most 256
//	    waiting; more get unavailable). Nothing is stored twice: the
//	    journal also refuses a msgid it has stored (dead), or whose job is
//	    done with its result still kept (ResultTTL); that is ACKed too, and
//	    a done job's kept result is sent as REPLY again when the REQUEST
//	    asks for one. A header limit: naming a limiter that does not exist
//	    is a bad value. A BULK (bulk.go) is its jobs' REQUESTs checked
//	    alike and stored in one AppendBulk: one ACK of the bulk's msgid,
//	    or one ERROR naming the first job refused, nothing stored; a job
//	    of it already held or stored is ACKed with the rest.
//	 2. The ACK is sent from the append's done callback, after the fsync. Only
//	    then is the job pending (or delayed, with a delay header) and
//	    dispatchable. A failed write answers ERROR unavailable and the job is
//	    forgotten: the client never saw an ACK.
//	 3. Dispatch happens whenever a job becomes pending or a worker offers a
//	    slot (READY). A worker takes from its highest-weight queue that has
//	    a job its controls let go; a queue gives its next job (below:
//	    Priorities, Fair shares) to the free worker that weighs it highest,
//	    least recently used first. Each delivery uses one slot. The
//	    forwarded REQUEST keeps the client's msgid and has reply-requested
//	    added, and attempt:N from the second delivery on.
//	 4. REPLY from the worker holding the job: Complete in the journal (it
//	    may wait a moment to share an append's commit; on etcd up to
//	    --etcd-hold-completes, so that a new job takes its key: a failover
//	    meanwhile runs the job again), the REPLY forwarded
//	    to the client if it asked, the result kept for ResultTTL if set. A
//	    REPLY or FAIL for a job the sender does not hold is ignored and
//	    counted.
//	 5. Attempts: a worker lost (heartbeat timeout, KBYE, DISCONNECT), a job
//	    past its timeout:N, or a FAIL counts one attempt, recorded in the
//	    journal. Lost and timed-out jobs go back to the head of their queue
//	    (of their priority),
//	    oldest first; FAILed ones wait RetryBackoff·2^(attempts-1) (at most
//	    MaxRetryBackoff) and then join the tail. When attempts exceed
//	    retry-count (default 3) the job is buried: the dead letters keep it
//	    with its last reason.
//	 6. Start-up (Run): every pending job in the journal is loaded, per queue
//	    in FIFO order, before the sockets are bound. What was in flight is
//	    pending again; a restart is not an attempt.
//	 7. A REQUEST message that could not be written to a worker (its
//	    connection closed with it queued) puts the job back at the head of its
//	    queue without counting an attempt.
//
// # Priorities
//
// A job's header priority:N (0 to 65535, emqp.DefaultPriority 1024
// without it) orders its queue: lower first, FIFO among equals. Across
// a worker's queues the weights decide as before. A queue's pending jobs
// are a deque per priority in use under a heap of those priorities
// (dispatch.go, jobQueue): a push or a pop is O(1), plus O(log p) when a
// priority starts or stops having jobs. "The head of its queue" (a lost
// or timed-out job) is the head of its priority. The priority is in the
// stored headers, so a restart or a failover, loading each queue in FIFO
// order, orders it again the same way. A job taken out of the middle of
// its queue (removed, cancelled) is marked and skipped when it comes up.
//
// # Fair shares and limits
//
// Within a priority, a queue's jobs are taken by tenant (header
// tenant:NAME; "" without it) in weighted turn, FIFO within a tenant
// (fair.go): each priority level is a ring of lanes, one a tenant, and a
// lane's turn gives up to its tenant's weight of jobs (deficit round
// robin, a job costing one). A job goes only when its queue (controls,
// above), its tenant and every named limiter it names (header
// limit:NAME[;NAME...], limiters.go) have room: a concurrency (jobs held
// by workers) and a rate (a token bucket with a burst). What has no room
// is passed over, never refused: a tenant out of room has its lanes
// taken out of their rings as they come up and put back when a job of it
// is released or its rate's alarm rings; a job whose limiter is full
// waits in that limiter's line and goes back to the head of its lane
// when the limiter has room, so only the jobs naming it wait. Each step
// is O(1) (plus O(log p) for the priority heap) whatever the number of
// tenants. A tenant's limits are its own settings (store.TenantSettings,
// ChangeTenant) over its queue's tenant defaults (QueueSettings'
// Tenant*); limiters are shared by every queue of the broker (with
// shards: of the shard). Both are in the journal, applied once stored as
// the queue controls are. A REQUEST naming a limiter that does not exist
// is refused (bad_request): a typo must not lift a limit. A tenant is
// held while any of its jobs is, and then until its rate's bucket is
// full again, so that memory follows the jobs held, not the names ever
// seen. Replay loads each queue in FIFO order, so each tenant's order
// survives a restart or a failover; the turns among tenants start again
// from the order their first jobs come in.
//
// Why (why.go) says why a job is where it is, looking at the same state
// dispatch does, in the order dispatch meets it: storing, delayed,
// waiting for parents or a batch (from the journal), queue moving
// between shards, queue paused, a limiter full, its tenant at its
// concurrency (naming the jobs that hold it) or rate (the next room),
// the queue at its concurrency or rate, no worker (and when the last
// left), every slot busy (and what goes first), in flight (worker,
// since, attempt, deadline, overdue), done, dead or cancelled. A job
// without a timeout held longer than OverdueAfter is overdue: an event
// and a count, once a delivery; it runs on.
//
// # Unique jobs
//
// A REQUEST with unique:KEY (and unique-for:SECONDS) is stored only if
// no other job of its queue holds KEY: one pending, delayed or in flight,
// or done less than its unique-for ago. The journal decides, in its
// committer (store: the unique index), so REQUESTs of one key at once,
// from any number of clients, store one job; the others get ERROR
// duplicate whose text ends with "is held by job MSGID". The holder's own
// msgid sent again is a duplicate REQUEST as any (ACKed), also within its
// hold after it is done. A job that dies, is cancelled, removed or purged
// lets its key go at once: nothing will run under it, and a dead letter
// that kept its key would block the job that replaces it until an
// operator acts. A revived dead job takes its key back if it is free, and
// otherwise runs without one (its trail says so).
//
// # Workflows
//
// A REQUEST with after:MSGID[;MSGID...] (at most 1,000) or
// after-batch:NAME waits for those jobs, or for the whole batch, to be
// done (REPLY); batch:NAME puts a job in a batch (batch-open keeps the
// batch open for more). The journal decides (store/workflow.go): a
// parent it does not hold (but one done and kept) refuses the REQUEST
// with ERROR bad_request, as does a dead or cancelled parent unless
// after-failed:run; so no cycle can be made. A job with something to
// wait for is stored Waiting and ACKed, then forgotten by the loop
// (workflow.go): only the journal holds it. When its last parent is done
// the journal releases it in the parent's own write and tells the loop
// (Follow), which queues it as a replayed job; a parent that dies, or is
// cancelled or removed, cancels it (the default, after-failed:cancel,
// kept for ResultTTL with the parent named in its trail) or releases it
// (after-failed:run). A cancel of a waiting job goes to the journal. A
// restart or failover loses nothing: the waiting jobs, who waits for
// whom and the batches are in the journal, and a release the journal
// makes while a broker starts is queued once (the loop skips a job it
// loaded already). SCHEDULE refuses the workflow headers: a schedule's
// fires are plain jobs.
//
// # Cancelling and progress
//
// Cancel (cancel.go; emq jobs cancel, the admin API, a client's CANCEL)
// takes a job out for good in any state the broker holds it, as cancel.go
// describes: in flight, its worker is sent CANCEL and whatever it answers
// is ignored. The journal keeps it in state cancelled for ResultTTL with
// retain-done, else deletes it; it is never retried. PROGRESS from the
// worker holding a job is kept in memory only (the latest, while the job
// is in flight), shown by JobProgress, and announced as an event at most
// 10 times a second per job.
//
// Admin reads and changes (api.go) run on the loop too, as posted
// closures: a purge or a retry changes memory and journal together, and
// answers with the journal's refusal (store.ErrNotFound,
// store.ErrWrongState, ...) or ErrStopped. A job removed or purged while
// its write is in progress is ACKed when the write lands (it was stored)
// and then forgotten, as the journal deletes it after storing it.
//
// # Tracing
//
// With Options.TracerProvider (cmd/emq makes one from OTEL_*), each job
// has OpenTelemetry spans in the broker (tracing.go): receive (REQUEST
// read until journaled and ACKed), wait (pending until dispatched, made
// when it ends), dispatch (given to a worker until REPLY, FAIL or loss;
// its events say which, and a delivery links to the one before). Their
// parent is the span the job's traceparent header names, or the receive
// span for a job that came without one; the REQUEST forwarded to the
// worker carries the dispatch span as its traceparent. The header is the
// job's, stored and shown as any other: a restart or a failover loses
// only the in-memory record of a sampled job (its wait's start, its last
// delivery), and its next delivery is in its trace still. A job whose
// sender did not sample it makes no span and is marked so, at one header
// read. The loop starts the spans whose ids it needs and hands every
// span's end to one goroutine, which copies it for the exporter. Without
// a TracerProvider each hook is one nil check.
//
// # Queue controls
//
// An operator may pause a queue, limit its jobs in flight across every
// worker (concurrency), and limit its dispatches a second (a token
// bucket with a burst): controls.go, store.QueueSettings. They are kept
// in the journal and applied once stored; Options.Queues (the config
// file's queues:) gives defaults to queues with nothing stored. A paused
// queue still takes, stores and ACKs jobs; resumed, it dispatches them in
// order. Dispatch (offer, fill) asks canDispatch before each job: a
// queue held back by its rate sets its refill alarm for the next token;
// one held back by its concurrency is filled again at the end of the turn
// in which one of its jobs is released. Other queues of the same worker
// go on meanwhile.
//
// # Events
//
// The loop emits an Event at each step of a job's life, when a worker
// joins or leaves, and when a queue's controls change (events.go). With
// no listener that is one length check for the stream; a job's event
// also goes into its trail (below), a map entry until its next write. A
// listener (Listen: admin's GET /api/v1/events, emq tail) has a buffer of
// EventBuffer events that the loop appends to without blocking and its
// reader takes whole; one that falls behind is dropped, never waited
// for, and counted.
//
// The same job events make its trail (store.Job.Trail): the loop keeps
// those not yet written in b.trails, by job, and hands them to the
// journal with the job's next write (RecordAttempt, Bury, Complete with
// retain-done), so a trail costs no write of its own; a job given out
// again and again without a write keeps its last MaxTrail.
//
// # Peers
//
// A peer is (endpoint, routing id), one entry in one table with its
// peerRole;
// every message starts with one lookup there. It becomes a worker by
// INFORM (ACKed, then a HEARTBEAT at once and every HeartbeatInterval).
// Any message from a peer counts as its heartbeat; silent for
// HeartbeatTimeout, it is lost. A new INFORM from a known worker replaces
// its queues and resets its free slots to zero (it offers them again);
// the jobs it holds stay its own. A READY, HEARTBEAT, REPLY or FAIL from a
// peer that has not INFORMed gets no answer (see DESIGN.md: an answer
// would keep an original EventMQ job manager from re-INFORMing). Clients
// are not peers: a job remembers its client's routing id to forward the
// REPLY to; after a restart the REPLY goes to whichever endpoint has that
// id connected.
//
// An INFORM with peer type "scheduler" makes a scheduler instead:
// EventMQ's emq-scheduler. It gets HEARTBEATs, is lost like a worker and
// never gets jobs; its REQUESTs are jobs like any client's. Only with
// ForwardSchedules (EventMQ's split) is it passed schedules: as in
// EventMQ's router, each SCHEDULE goes to one scheduler in turn and each
// UNSCHEDULE to all, unchanged, and with none connected they get ERROR
// unavailable. A peer that INFORMs as the other role is lost in its old
// role first.
//
// # Schedules
//
// The broker keeps schedules in its journal (schedules.go). SCHEDULE
// (queue, headers, interval_secs, payload, cron) stores one and is ACKed
// after the fsync; UNSCHEDULE (the same frames) removes the one they name
// and is ACKed. A bad interval_secs, cron expression, tz or run_count gets
// ERROR bad_request saying which; a failed write, unavailable.
//
// Identity (scheduleid.go): a schedule is named by
//
//  1. its header schedule-id:NAME, if given;
//  2. else, for an EventMQ payload ["run", {...}], EventMQ's
//     schedule_hash: the hex SHA-1 of Python's json.dumps(sort_keys=True)
//     of the run object's args, kwargs, class_args, class_kwargs, path
//     and callable. An original client's schedule() sent twice names one
//     schedule, and its unschedule() finds it;
//  3. else the hex SHA-1 of the queue and the payload.
//
// A SCHEDULE naming a kept schedule with the same queue, headers, cadence
// and payload changes nothing (it does not fire again at once), unless a
// write of that id is under way (then it is written again, after it: the
// last one sent holds); one that differs replaces it, due from now as a
// new one.
//
// When: interval_secs N ≥ 1 fires every N seconds, keeping its phase;
// interval_secs -1 fires at the times of cron (5 fields or a descriptor
// such as @hourly) in UTC, or in the header tz:Area/City (or the
// expression's CRON_TZ= prefix). Across daylight saving changes a cron
// schedule that names its hours fires once a local time, as classic cron
// does: not again in the repeated hour, and a skipped local time at the
// same time on the old clock (02:30 skipped is 03:30). The first fire is
// at once unless nohaste; run_count:N ends the schedule after N fires;
// guarantee is accepted (every fire is durable anyway). Headers are
// checked as a REQUEST's, as the fires are jobs with them.
//
// Exactly once: a fire's msgid is "schedule-", 16 hex digits of the id's
// SHA-1, "-" and the due time in Unix nanoseconds. The journal makes the
// fire's job and moves the schedule's next due time in one transaction
// (store.Journal.FireSchedule), and refuses a fire whose due time is no
// longer the schedule's next, or of a paused schedule: neither a restart
// nor a second broker can make a fire twice, and a crash before the
// commit leaves the due time in place for the next broker to fire. While
// the schedule's queue holds MaxPending jobs its fires make no job (the
// schedule goes on, the fires are counted as skipped, a log line says
// when it starts and ends); a fire the journal cannot store (a size limit
// lowered since) pauses the schedule. The fire is then a pending job like
// a REQUEST's, with the schedule's queue, headers and payload: retried,
// timed out and dead-lettered as any job.
//
// Missed fires: a broker late for a due time (it was stopped, or the
// schedule paused) fires once, for the first missed due time, then goes on
// from the next due time after now: one catch-up fire per schedule after
// an outage, not one per missed interval. With the header misfire:skip
// there is none when the due time is over a minute (misfireGrace) past; a
// restart of a few seconds still fires it. A first fire "at once" that no
// broker made yet (the schedule was added to a stopped broker's journal)
// is not missed.
//
// The loop holds each schedule as one deadline (id, cadence, next due
// time, fires left, paused); queue, headers and payload stay in the
// journal. Due times are wall-clock times (Options.Now in a test): the
// loop waits for one on the monotonic clock and, when it comes, checks
// the wall clock again, so a fire is never made before its due time.
//
// # Pub/sub
//
// PUBLISH (msgid, topic, message) is taken on both eMQP endpoints and on
// PublisherIncoming, a ROUTER that takes nothing else (pubsub.go). The
// reader goroutine that decoded it hands [topic, message] straight to the
// PUB endpoint (internal/zmtp's Pub) on PublisherOutgoing: it never enters
// the inbox, the loop or the journal, so pub/sub cannot delay a job and
// holds no broker state. It is not acknowledged. A refused PUBLISH
// (malformed; over a quarter of PublisherBuffer, which no subscriber
// could queue; pub/sub off) is answered with ERROR: by the loop for the
// eMQP endpoints (the reader passes it on), by the reader on
// PublisherIncoming.
//
// The Pub owns the subscribers. Each SUB connection has a reader (its
// subscriptions: ZMTP 3.0 messages 0x01/0x00 + prefix, ZMTP 3.1
// SUBSCRIBE/CANCEL commands) and a writer with its own queue. Publish
// walks a copy-on-write list of subscribers and appends the message (one
// shared copy) to each matching queue that has room: SubscriberHWM
// messages, a quarter of PublisherBuffer bytes, and PublisherBuffer for
// all; else the message is dropped for that subscriber and counted.
// Publish never blocks on a subscriber, so one that stops reading loses
// its own messages and, once its write has been blocked for 10 s, its
// connection; nobody else notices. Messages of one publisher connection
// reach each subscriber in order (one reader goroutine publishes them).
// With PublisherLastValue a cache keeps each topic's latest message;
// a new subscription and the publishes are ordered by one lock, so the
// subscription gets the cached value before anything newer.
//
// # Who may connect, and do what
//
// With CURVE or PLAIN configured (security.go), each connection's
// handshake ends in the peer's identity and roles, kept on its zmtp.Conn.
// The reader goroutine checks every message's command against those
// roles before the message reaches the inbox: one its roles do not allow
// is answered ERROR forbidden on that connection and never touches the
// loop's state. The allowed keys and users are an atomic pointer that
// ReloadCredentials (SIGHUP) swaps whole; handshakes read it, nothing
// else does. Without a mechanism every peer has every role.
//
// # Stopping
//
//	serving ──Shutdown(ctx), or Run's ctx ends──▶ draining ──nothing in flight, DrainTimeout,──▶ closing ─▶ Run returns
//	   │                                                 or Close, or Shutdown's ctx ends      ▲
//	   └──── Close, or the journal fenced ───────────────────────────────────────────────────────┘
//
// Shutdown is the graceful stop and Close the immediate one, as net/http
// names them. Draining: REQUESTs get ERROR unavailable, nothing more is
// dispatched (jobs that come due or come back stay pending), Serving
// says false (the admin API's /readyz 503), the named API still answers. The REPLYs of jobs in flight complete them as
// usual, and when none is left the broker closes. Closing: KBYE to every
// peer, the journal writes in progress land (up to ShutdownTimeout),
// queued messages are written, the journal is closed. Jobs still in flight
// stay journaled and run again after the next start.
//
// # A replicated group
//
// Package group runs a Broker for each leadership it wins, on the journal
// in etcd, and calls Fence when its lease ends; a standby holds no
// Broker. Fencing lives in the journal: a broker that lost its
// leadership cannot write (store.ErrFenced), hence cannot ACK, and stops.
//
// # Failures
//
//   - Malformed message: ERROR with a code (bad_request,
//     unsupported_version, unknown_command) and the decoder's sentence, one
//     log line (at most 50 a second, then a count of the rest), a count in
//     Stats. Nothing is journaled. A frame over MaxFrameSize: ERROR too_large,
//     then the connection is closed before the frame is read.
//   - Journal write failure: the client gets ERROR unavailable, never ACK;
//     what the broker holds keeps being served. A failed Complete or
//     RecordAttempt is logged: the job stays journaled and runs again after a
//     restart (at-least-once).
//   - A journal that says store.ErrFenced (another broker writes it now, or
//     a lease ended), to any write, stops the broker at once: nothing more
//     is ACKed or dispatched, the write that found out is refused, peers
//     get KBYE, Run returns the error.
//   - A worker whose connection breaks keeps its jobs until the heartbeat
//     timeout: a reconnecting worker (same routing id) is the same peer.
//   - SIGKILL: only ACKed jobs matter, and each was fsynced before its ACK
//     (on etcd: held by a majority of its members).
//   - Of a group's leader: its lease ends within LeaderTTL and a standby
//     takes over (above). Etcd without a majority: writes time out, the
//     leader fences itself (no ACK), and no one is elected until etcd is
//     back.
//
// # Transport
//
// Both endpoints are internal/zmtp Routers, not zmq4's ROUTER. zmq4
// v0.17.0 as it comes lets any TCP client panic the process (a frame header
// announcing 2^50 bytes is allocated as announced; a truncated metadata
// property in the handshake indexes out of range), stalls every peer behind
// one (handshake in the accept loop without a deadline; sends under one
// socket-wide lock), delivers one routing id's messages to every connection
// holding it, drops sends to unknown ids silently, writes each frame with
// two syscalls and never answers ZMTP PING (docs/benchmarks.md compares
// the two). internal/zmtp keeps zmq4.Open for the handshake and does the
// rest itself; see its package doc. Tests: internal/zmtp (unit) and
// hostile_test.go, interop_test.go (libzmq).
//
// # Figures
//
// Measured figures (throughput, latency, start-up with a million jobs,
// idle cost of delayed jobs and of schedules) live in docs/benchmarks.md,
// with the commands that produce them; this file only says how the
// broker works.
//
// # Not done (yet)
//
// Without ResultTTL a completed job leaves nothing behind, so a msgid sent
// again after its job was done makes a second job; EMQ's client only
// resends until the ACK, and with ResultTTL set the kept result makes the
// resend a duplicate.
package broker
