// Package store is EMQ's journal: every job the broker has acknowledged,
// until a worker replies to it, it is dead-lettered, or an admin removes
// it. The broker and the admin tools use the Journal interface. This
// package holds that interface, the records, the layout (layout.go) and
// the journal's logic (writes.go, reads.go, schedules.go, queues.go),
// written once over buckets of sorted keys (kv.go) with one committer
// (core.go). The backends are packages of their own, each with its own
// Options: boltstore in one bbolt file, etcdstore under a key prefix of
// an etcd cluster (a replicated group of brokers). Nothing here imports
// bbolt or etcd.
//
// # The contract
//
// Journal (journal.go) says what every backend does, and package
// storetest checks it: a backend that passes the conformance suite
// unchanged can stand in for boltstore. What only some backends do is an
// optional interface (Compactor); the bbolt schema steps are package
// migrations (it creates this layout's buckets), which only boltstore
// uses.
//
// Every refusal is a sentinel error matched with errors.Is: ErrNotFound,
// ErrWrongState (bury a dead job, revive a pending one), ErrInvalidJob,
// ErrTooLarge and ErrBadFilter refuse one call and change nothing;
// ErrClosed, ErrReadOnly and ErrFenced mean the journal takes no more
// writes (ErrFenced: another process owns it now, so the broker stops);
// ErrLocked, ErrCorrupt and ErrTooNew refuse an Open and name the file.
// Anything else is the storage failing (I/O, disk full).
//
// # Layout
//
//	meta        schema version (package migrations has the steps)
//	jobs        msgid -> record (queue, headers, payload, client id,
//	            enqueue time, attempts, last error, not-before, state, seq)
//	pending     len(queue) queue seq(8, big endian) -> msgid
//	dead        the same, for dead letters
//	done        the same, for jobs done and kept with their result
//	results     msgid -> expiry(8) result
//	result_exp  expiry(8) msgid -> (nothing)
//	schedules   schedule id -> schedule record
//	queues      queue name -> an operator's controls (JSON)
//
// A job completed with a keep time (the broker's retain-done) stays in
// jobs with state done, its finish time where a pending job keeps its
// not-before, until ExpireResults sweeps it with its result; a resend of
// its msgid meanwhile is a duplicate, and after its time, even before the
// sweep, a new job.
//
// Order comes from the sequence, not the msgid: a queue's keys in the
// pending index are its FIFO, whatever ids clients send. Time-ordered
// (UUIDv7) msgids also land at the tail of the jobs tree, which keeps
// appends cheap; random (v4) ids work, slower.
//
// # Writes: one committer, group commit
//
//	callers ──Append/Complete/...──▶ queue (mutex, never blocks on disk)
//	                                   │ all queued, up to MaxBatch
//	                                   ▼
//	                committer: one bbolt transaction, Commit (fsync)
//	                                   │
//	                                   ▼
//	                 done(result, err) for each write, in order
//
// Each transaction takes every write queued while the previous one was
// committing, so concurrent writers share one fsync without a fixed
// delay. The one exception: a batch of only Completes (which gate no
// ACK) waits up to LazyDelay (2 ms) for a write that cannot wait to share
// its commit, so a job costs one fsync instead of two at low load. A
// write's done runs only after its transaction is durable; if
// the commit fails (disk full, I/O error), every write of that batch gets
// the error and nothing of it is stored. Records are encoded on the
// caller's goroutine; the committer only checks for a duplicate msgid,
// sets the sequence and puts two keys.
//
// Reads (Load, Payloads, Get, List, Counts, Result) use their own read
// transactions and never wait for the committer. Load leaves payloads in
// the file (only their sizes are read); Payloads copies them out when the
// broker dispatches. bbolt maps the file read-only, and the pages a read
// touches stay in the process's resident set: the store gives them back
// to the kernel after opening, after Load and Payloads, and after commits
// that write much (pages_linux.go). Compact runs on the
// committer between two batches and briefly excludes readers while it
// swaps the file.
//
// # Failures
//
//   - SIGKILL at any moment: bbolt's commit writes the data pages, syncs,
//     then writes the meta page and syncs, so a reopened file is at the
//     last completed commit; every done that was called is in it.
//   - Open of a file held by another process fails after LockTimeout with
//     ErrLocked; of a file that is not bbolt, or is damaged, with
//     ErrCorrupt; of a file newer than this binary, with ErrTooNew. Each
//     error names the file, and the file is left as it was.
//
// # The journal on etcd
//
// etcdstore keeps each bucket as a key range, PREFIX BUCKET "/" KEY, the
// same keys and values as the file. A write is durable when etcd has
// committed it, which is when a majority of its members hold it. The
// committer applies a batch on an overlay of the batch's own changes,
// having read first, in a few requests, every key its writes will read.
// It then commits the batch in transactions of at most MaxTxnOps
// operations and MaxRequestBytes (etcd's defaults: 128, 1.5 MiB), each
// guarded by the owner's leadership (Guard): writes that touch a common
// key share a transaction or wait for a later wave; each wave's
// transactions go at once. A guard found false, or a transaction whose
// outcome is unknown (a timeout), fences the journal: that write and
// every later one fail with ErrFenced, and the broker stops, so that
// whoever leads next loads what etcd holds. Sequences come from blocks
// of 65,536 reserved in meta/seq by a guarded transaction of their own.
// Views read at one revision. Every CompactEvery (10 s) the journal
// compacts etcd's history to the revision of the period before.
//
// Keys a job's life writes: Append puts two (jobs/MSGID, pending/QUEUE
// SEQ) after reading two (jobs/MSGID and results/MSGID, for duplicates);
// Complete reads one and deletes the two. So 4 key changes, 3 reads and
// about a fiftieth of a transaction a job when the broker is busy.
// Keeping a result (retain-done) puts three more and deletes one. A job
// is one value: MaxJobSize is at most what one request carries less
// 64 KiB, for the keys beside it and what its record gains over its life
// (reasons, trail). A write must fit in one request: a result too large
// to keep beside its job is not kept (the job is completed without it),
// and a schedule whose fire (the schedule and its job) would not fit is
// refused with ErrTooLarge.
//
// # Cost
//
// A commit costs two fdatasyncs plus one write per dirty page, so the
// journal's throughput grows with the writes queued at once: concurrent
// writers share fsyncs. docs/benchmarks.md has the measured figures
// (go test -bench . ./store/).
package store
