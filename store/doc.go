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
//	meta        schema version (package migrations has the steps); keys:
//	            the names of the keys the journal was ever encrypted with
//	jobs        msgid -> record (queue, headers, payload, client id,
//	            enqueue time, attempts, last error, not-before, state, seq)
//	pending     len(queue) queue seq(8, big endian) -> msgid
//	dead        the same, for dead letters
//	done        the same, for jobs done and kept with their result
//	cancelled   the same, for jobs cancelled and kept (Cancel with a keep time)
//	unique      len(queue) queue KEY -> expiry(8; 0 = held by a pending job) msgid
//	unique_exp  expiry(8) unique key -> (nothing): the holds that end
//	results     msgid -> expiry(8) result
//	result_exp  expiry(8) msgid -> (nothing)
//	schedules   schedule id -> schedule record
//	queues      queue name -> an operator's controls (JSON)
//	waiting     len(queue) queue seq -> msgid: jobs that wait for others (workflow.go)
//	after       len(parent) parent -> 1: something waits for parent;
//	            len(parent) parent child -> (nothing): child waits for parent
//	batches     batch name -> open, times, counts by state, waiters
//	after_batch len(batch) batch child -> (nothing): child waits for the batch
//	settling    'j' msgid or 'b' batch -> status: an end whose children
//	            are not all settled yet (a bounded backend's later writes)
//	tenants     len(queue) queue tenant -> a tenant's settings (JSON); the
//	            tenant may be "" (jobs without one)
//	limiters    limiter name -> its settings (JSON)
//
// A job completed with a keep time (the broker's retain-done) stays in
// jobs with state done, its finish time where a pending job keeps its
// not-before, until ExpireResults sweeps it with its result; a resend of
// its msgid meanwhile is a duplicate, and after its time, even before the
// sweep, a new job.
//
// A job with a unique key (Job.Unique, record version 3) holds it in the
// unique index while it is pending: Append, in the committer, refuses
// another msgid with a UniqueError naming the holder, so appends of one
// key at once store one job whatever their number, at the cost of one
// more key read. Complete leaves the key held for the job's UniqueFor,
// with an entry in unique_exp that ExpireResults sweeps (the hold is
// checked by its time at every Append, swept or not); Bury, Cancel,
// Remove and PurgeQueue of a pending job let it go at once. Revive takes
// it back when it is free. Only a pending job's record can hold a key,
// so none of these reads the index to let it go.
//
// A job of a workflow (record version 4: its parents, the batch it
// waits for and the one it is in, its after-failed rule, its waits left)
// is stored Waiting while it waits, only in the journal; workflow.go
// says how a parent's end releases or cancels it in the parent's own
// write, and how batches count.
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
//	              committer: one KV.Update (boltstore: a log record and
//	              one fdatasync; etcdstore: guarded transactions)
//	                                   │
//	                                   ▼
//	                 done(result, err) for each write, in order
//
// Each Update takes every write queued while the previous one was
// committing, so concurrent writers share one flush without a fixed
// delay. A batch of only Completes (which gate no ACK) is not flushed on
// its own: the next durable batch flushes it (boltstore; LazyDelay, 0 by
// default, can make it wait for one). On etcd the Completes a batch has
// beyond its Appends (as many as the last batches' Appends) wait for the
// Appends of the batches after, for about HoldCompletes, so that a new
// job's put ends an old job too (etcdstore/slots.go); not while the
// journal holds workflows, whose Completes settle other jobs. A write's
// done runs only after its
// batch is durable; if the commit fails (disk full, I/O error), every
// write of that batch gets the error and nothing of it is acknowledged.
// Records are encoded on the caller's goroutine; the committer only
// checks for a duplicate msgid, sets the sequence and puts two keys.
//
// AppendBulk is one write of many jobs (bulk.go): the committer tries
// each job's Append on a stage over the transaction, which sees the
// jobs before it, and puts the stage into the transaction only once
// every job is taken. A job refused refuses the bulk before it has
// changed anything, so the other writes of the commit go on.
//
// Reads (Load, Payloads, Get, List, Counts, Result) never wait for the
// committer, and see every acknowledged write. Load leaves payloads
// where they are (only their sizes are read); Payloads copies them out
// when the broker dispatches.
//
// # What an ACK promises (boltstore)
//
// An ACK follows the fdatasync of the log record that holds the job. So
// the job survives a process kill, a kernel crash and a power cut,
// provided the disk honours a flush (a drive that acknowledges writes it
// still holds in a volatile cache, with its write cache on and no power
// protection, can lose them; no software can tell). The tests cut power
// with a file system that drops every unflushed write (internal/cutfs).
//
//   - A torn tail: the machine stopped while the last write was going
//     to disk. That write was never flushed, so never acknowledged; the
//     next open cuts it (zeroes it, flushes) and logs the segment and
//     offset. A write is torn when its end, or a 4 KiB block of it, is
//     still what the segment held before (zeros).
//   - Damage: bytes that reached the disk and then changed. Every log
//     record carries a CRC-32C and its sequence, every bbolt value a
//     CRC-32C of its bucket, key and value (layout.go: Seal), checked at
//     every read; only Load, which needs a job's fields, takes a record
//     of 64 KiB or more unchecked (Peeker), and its payload is checked
//     whole when read: a restart does not read every byte of a backlog of
//     large jobs from the disk (4 GiB: 0.8 s, not 53 s). A bad log record the journal still needs refuses the
//     open, naming the segment, the offset and emq journal check; the
//     operator chooses --journal-recover (every good record kept, what is
//     lost logged) or emq journal salvage (a new journal). A bad record
//     that is already checkpointed loses nothing: it is passed over and
//     logged. A bbolt value failing its checksum is never served: a job
//     goes to the dead letters as "damaged in the journal", anything else
//     to the damaged bucket (quarantine.go), each logged and counted. A
//     bbolt file whose structure is damaged (a page that is not what it
//     says) fails the open or the read that meets it with ErrCorrupt
//     naming the file, never a crash; bbolt's own check runs at each
//     open, after a walk of the pages that reads them itself (where a
//     bad key cannot fault), and nothing is written into a file until
//     it has passed (a migration neither). emq journal salvage reads
//     such a file page by page without bbolt (boltstore's
//     salvage_pages.go): every value whose checksum holds is kept, from
//     the pages that are live, and what is not is named.
//   - A failing disk: a failed fdatasync (EIO) is not retried, since
//     Linux may have dropped the pages it held: nothing of that batch is
//     acknowledged, and the journal takes no more writes (the broker
//     answers ERROR unavailable, naming the segment) until it is
//     reopened. A full disk refuses the
//     batch and the next one tries again.
//   - A log that grows: the checkpoint writes the log into bbolt every
//     CheckpointEvery or CheckpointBytes; if it cannot (bbolt full, an
//     I/O error, a damaged file), the log grows to MaxLogBytes, then
//     durable writes fail with boltstore.ErrLogFull (the broker's ERROR
//     unavailable, naming it) while nothing acknowledged is lost.
//   - Memory: until its checkpoint, a value of 1 KiB or more is held
//     as its place in the log (and a job's head), read back from there
//     with its CRC-32C checked; what the log holds costs disk, not
//     memory, whatever the payloads.
//
// # Encryption at rest
//
// With keys (CoreOptions.Keys: a Keyring, a file of named AES-256 keys)
// the core encrypts payloads, headers, last errors, the trail's reasons,
// results and schedules before a backend has them, and decrypts them as
// it reads (encrypt.go, enctx.go): the log, bbolt, etcd and backups hold
// them encrypted. A job's head and its payload are encrypted apart, so
// Load decrypts heads only. What the indexes need stays in clear. A tag
// that fails is damage, moved aside like a failed checksum. meta/keys
// names every key ever used (written before the first value under it);
// an open without one of them fails with ErrKeys naming it. A journal
// with keys is at schema migrations.Encrypt (etcd: format 6), which
// older binaries refuse; one without keys is unchanged, byte for byte.
//
// Keys rotate online (rekey.go): SetKeys gives a new first key, which
// seals what is written from then on, and refuses keys without one that
// meta/keys names. Rekey seals the rest again under it in paced writes
// of the committer, its place a record in meta (meta/rekey) written with
// each step, so that the next open for writing (a restart, the next
// leader) goes on from there; the last step drops the other keys from
// meta/keys, and the journal opens without them.
//
// # Failures
//
//   - Open of a file held by another process fails after LockTimeout with
//     ErrLocked; of a file that is not bbolt, or is damaged, with
//     ErrCorrupt; of a file or log segment newer than this binary, with
//     ErrTooNew. Each error names the file, and the file is left as it
//     was.
//
// # The journal on etcd
//
// etcdstore keeps each bucket as a key range, PREFIX BUCKET "/" KEY, the
// same keys and values as the file, but for the state indexes (pending,
// dead, done, cancelled, waiting): since format 4 those live in the
// journal's memory alone, derived from the job records. A write is
// durable when etcd has committed it, which is when a majority of its
// members hold it.
//
// Only the group's leader writes under the prefix, every write guarded
// by its leadership, so etcdstore keeps a shadow of every key there:
// read once when it opens (at one revision), and changed by each of its
// commits. It holds a job's head (its record without payload or trail),
// a kept result's expiry, small values whole, and the derived indexes:
// about 330 bytes a stored job whatever its payload (312 MiB of heap for
// 1,000,000 jobs). A batch reads from the shadow, not etcd: whether a msgid is
// stored, a job's head for a Complete, an index. Only a value the
// shadow does not keep (a large one that a write rewrites) is read, in
// a few requests before the batch is applied. Views read a clone of the
// shadow (copy on write) with etcd at the shadow's revision.
//
// Reading the shadow is what a takeover would cost: keys only in one
// request, then the values of consecutive keys a few requests at once
// (etcd 3.4 walks a whole range for each page of it). A standby instead
// keeps its own copy (etcdstore.Warm): read once, then changed by a watch
// on the prefix, each event with the key's previous value. The new
// leader writes a mark under its guard and takes the copy once the watch
// has brought the mark; a copy that failed or is late is dropped and the
// journal read.
//
// The committer applies a batch on an overlay of the batch's own changes,
// then commits it in transactions of at most MaxTxnOps operations and
// MaxRequestBytes (etcd's defaults: 128, 1.5 MiB), each guarded by the
// owner's leadership (Guard): writes that touch a common key share a
// transaction or wait for a later wave; each wave's transactions go at
// once. A guard found false, or a transaction whose outcome is unknown
// (a timeout), fences the journal: that write and every later one fail
// with ErrFenced, and the broker stops, so that whoever leads next loads
// what etcd holds. Sequences come from blocks of 65,536 reserved in
// meta/seq by a guarded transaction of their own. Every CompactEvery
// (10 s) the journal compacts etcd's history to the revision of the
// period before, never past the shadow's or a view's.
//
// Batches may commit overlapped (Options.Pipeline; one at a time by
// default): a batch reads the changes of those in flight, and one that
// touched a key they change commits after them, and fails if one failed.
// The core reports writes in the order their batches were taken.
//
// Keys a job's life writes: since format 5 a job's record lives in a
// slot (slot/N, its value the msgid and the record; etcdstore/slots.go).
// Append puts one, Complete deletes it; neither reads. A job appended in
// the transaction that completes another takes the ended job's slot: one
// put over it is both, so on a steady stream a job's life costs one put.
// With the guard's compare (which etcd counts as a range), a job costs
// one or two operations and a share of two transactions: one each when
// the broker is idle, a fiftieth when it is busy. Keeping a result (retain-done) puts two more (results, its
// expiry) and the record again. A unique key is put with the Append and
// deleted with the Complete (or, with a hold, put again with its
// unique_exp entry, both deleted by the sweep). A job
// is one value: MaxJobSize is at most what one request carries less
// 64 KiB, for the keys beside it and what its record gains over its life
// (reasons, trail). A write must fit in one request: a result too large
// to keep beside its job is not kept (the job is completed without it),
// and a schedule whose fire (the schedule and its job) would not fit is
// refused with ErrTooLarge, as is a bulk over one transaction's
// operations (MaxBulk: 128 jobs by default) or one request's bytes.
//
// # Cost
//
// On one machine a commit costs one write and one fdatasync of the log;
// bbolt's own commits (two fdatasyncs and its dirty pages) come once a
// checkpoint, about a second, whatever the load, and a job completed
// before its checkpoint never reaches bbolt. On etcd a commit is a
// round of guarded transactions. Throughput grows with the writes queued
// at once: concurrent writers share flushes. docs/benchmarks.md has the
// measured figures (go test -bench . ./store/...).
package store
