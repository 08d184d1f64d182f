// Package store is EMQ's journal: every job the broker has acknowledged,
// until a worker replies to it, it is dead-lettered, or an admin removes
// it. The broker and the admin tools use the Journal interface; Bolt is
// its implementation in one bbolt file. No bbolt type crosses the
// interface, so a second backend (etcd) can be added beside it.
//
// # The contract
//
// Journal (journal.go) says what every backend does, and package
// storetest checks it: a backend that passes the conformance suite
// unchanged can stand in for Bolt. What only some backends do is an
// optional interface (Compactor); the bbolt schema steps stay in package
// migrations, which only Bolt uses.
//
// Every refusal is a sentinel error matched with errors.Is: ErrNotFound,
// ErrWrongState (bury a dead job, revive a pending one), ErrInvalidJob,
// ErrTooLarge and ErrBadFilter refuse one call and change nothing;
// ErrClosed, ErrReadOnly and ErrFenced mean the journal takes no more
// writes (ErrFenced: another process owns it now, so the broker stops);
// ErrLocked, ErrCorrupt and ErrTooNew refuse an Open and name the file.
// Anything else is the storage failing (I/O, disk full).
//
// # Layout of the file
//
//	meta        schema version (package migrations owns the steps)
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
// # Cost
//
// A commit costs two fdatasyncs plus one write per dirty page, so the
// journal's throughput grows with the writes queued at once: concurrent
// writers share fsyncs. docs/benchmarks.md has the measured figures
// (go test -bench . ./store/).
package store
