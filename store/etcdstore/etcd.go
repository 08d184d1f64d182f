// Package etcdstore is the journal under a key prefix of an etcd
// cluster: a store.Journal whose writes are durable once a majority of
// etcd's members hold them, for a replicated group of brokers (package
// group). store/doc.go says what each key holds.
package etcdstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/store"
)

// Options configure a journal on etcd.
type Options struct {
	// MaxBatch is the most writes one batch (one wave of transactions)
	// takes.
	MaxBatch int
	// MaxJobSize bounds a job's stored size (payload, headers, ids and
	// error text); a larger Append fails with store.ErrTooLarge. A job is one
	// etcd value: at most EtcdMaxJobSize(MaxRequestBytes).
	MaxJobSize int
	// ReadOnly opens the journal for looking only: writes fail with
	// store.ErrReadOnly, and it never compacts.
	ReadOnly bool
	// OnCommit, if set, is called after each commit with the number of
	// writes it held and how long it took (for metrics).
	OnCommit func(writes int, took time.Duration)
	// LazyDelay is how long Completes, when nothing else is queued, wait
	// for an Append to share its commit. 0 = commit at once.
	LazyDelay time.Duration
	// Gather is store.CoreOptions.Gather: how long a batch of several
	// senders waits for more of them (0 = never).
	Gather time.Duration
	// Prefix is where the journal's keys live ("/emq/"): brokers on the
	// same etcd and prefix share one journal.
	Prefix string
	// Guard is the condition every write is made under, in the same etcd
	// transaction: the broker's leadership (its election key at its
	// revision). A write that finds it false fails with store.ErrFenced, and so
	// does every write after it. None: writes are unguarded.
	Guard []clientv3.Cmp
	// MaxTxnOps and MaxRequestBytes are the etcd server's limits on one
	// transaction (--max-txn-ops, --max-request-bytes; 128 and 1.5 MiB by
	// default). A batch is split to stay within them; one change that
	// cannot fit fails with store.ErrTooLarge.
	MaxTxnOps       int
	MaxRequestBytes int
	// Timeout bounds each request to etcd.
	Timeout time.Duration
	// Pipeline is how many batches may be committing at once (1: one
	// after another). etcd puts concurrent transactions in one raft
	// round, so more batches in flight carry more jobs a round; the
	// writes are reported in the order their batches were taken.
	Pipeline int
	// Warm, if set, is this process's copy of the journal's shadow, kept
	// while it stood by: Open takes it instead of reading the journal
	// (a writer's Open only; it stops it either way). OnWarmMissed, if
	// set, is told why Open read the journal instead.
	Warm         *Warm
	OnWarmMissed func(error)
	// Keys, if set, encrypt payloads, headers, errors, results and
	// schedules at rest (store/encrypt.go); the prefix is then at format
	// encryptedFormat, which older binaries refuse. A journal that names
	// keys (meta/keys) opens only with them (store.ErrKeys).
	Keys *store.Keyring
	// OnDamage, if set, is told of each value found failing its check
	// (with Keys: its authentication tag), as it is moved aside
	// (store/quarantine.go).
	OnDamage func(store.Damage)
	// CompactEvery is how often the journal compacts etcd's history to
	// the revision it had one period before (0: never). Read-only
	// journals never compact.
	CompactEvery time.Duration
	// HoldCompletes is how long a Complete with no Append in its batch
	// to take its job's slot may wait for one in the batches after,
	// rather than cost a delete of its own (0 = never;
	// store.CoreOptions.HoldCompletes).
	HoldCompletes time.Duration
}

// DefaultOptions returns the defaults. MaxJobSize leaves room in one
// request for a job's keys and a kept result's.
func DefaultOptions() Options {
	o := Options{MaxBatch: 8192, LazyDelay: 2 * time.Millisecond, Prefix: "/emq/", MaxTxnOps: 128, MaxRequestBytes: 1536 << 10,
		Timeout: 5 * time.Second, CompactEvery: 10 * time.Second, Pipeline: DefaultPipeline, Gather: DefaultGather, HoldCompletes: DefaultHoldCompletes}
	o.MaxJobSize = MaxJobSize(o.MaxRequestBytes)
	return o
}

// DefaultPipeline is how many batches commit at once by default: one.
// On one machine of 2 cores, where etcd spends CPU on each transaction,
// more in flight made more and smaller transactions and fewer jobs a
// second (docs/benchmarks.md, issue 34); across a network, where a
// commit waits on the round trip, more may carry more.
const DefaultPipeline = 1

// DefaultHoldCompletes is how long a Complete waits by default for a
// new job to take its slot (Options.HoldCompletes).
const DefaultHoldCompletes = 100 * time.Millisecond

// DefaultGather is how long a commit of several senders' jobs waits for
// more of them by default (Options.Gather): a tenth of a commit on etcd
// (3–5 ms with three members on one machine).
const DefaultGather = 500 * time.Microsecond

// MaxJobSize is the largest job a journal on etcd stores when one
// request may carry maxRequest bytes: a job is one value, and a request
// needs room for the keys beside it.
func MaxJobSize(maxRequest int) int { return maxRequest - etcdMargin }

// etcdMargin is what a request carries beside one large job: keys,
// framing, the guard, and what a job's record gains over its life
// (reasons, trail events).
const etcdMargin = 64 << 10

// etcdOverhead is what a request carries beside its values.
const etcdOverhead = 8 << 10

// Validate reports the first bad option.
func (o Options) Validate() error {
	switch {
	case o.MaxJobSize <= 0:
		return fmt.Errorf("store: MaxJobSize must be > 0, got %d", o.MaxJobSize)
	case o.MaxBatch <= 0:
		return fmt.Errorf("store: MaxBatch must be > 0, got %d", o.MaxBatch)
	case o.LazyDelay < 0 || o.LazyDelay > time.Second:
		return fmt.Errorf("store: LazyDelay must be 0 to 1s, got %v", o.LazyDelay)
	case o.Gather < 0 || o.Gather > time.Second:
		return fmt.Errorf("store: Gather must be 0 to 1s, got %v", o.Gather)
	case o.HoldCompletes < 0 || o.HoldCompletes > time.Second:
		return fmt.Errorf("store: HoldCompletes must be 0 to 1s, got %v", o.HoldCompletes)
	case o.Prefix == "" || !strings.HasSuffix(o.Prefix, "/"):
		return fmt.Errorf("store: etcd prefix must end with /, got %q", o.Prefix)
	case o.MaxTxnOps < 8:
		return fmt.Errorf("store: MaxTxnOps must be at least 8, got %d", o.MaxTxnOps)
	case o.MaxJobSize > MaxJobSize(o.MaxRequestBytes):
		return fmt.Errorf("store: max job size %d is over what one etcd request of %d bytes carries (%d)",
			o.MaxJobSize, o.MaxRequestBytes, MaxJobSize(o.MaxRequestBytes))
	case o.Timeout <= 0:
		return fmt.Errorf("store: etcd Timeout must be > 0, got %v", o.Timeout)
	case o.Pipeline < 1 || o.Pipeline > 1024:
		return fmt.Errorf("store: etcd Pipeline must be 1 to 1024, got %d", o.Pipeline)
	case o.CompactEvery < 0:
		return fmt.Errorf("store: CompactEvery must be >= 0, got %v", o.CompactEvery)
	}
	return nil
}

// Journal is the store.Journal under a key prefix of an etcd cluster: a write is
// durable once etcd has it, which is once a majority of its members hold
// it. Each bucket of the layout (doc.go) is a key range, PREFIX BUCKET
// "/" KEY; meta/format says the layout's version and meta/seq the
// sequences handed out (a block at a time).
//
// The committer is store.Core's; each batch becomes one etcd
// transaction, or a few when it is over MaxTxnOps or MaxRequestBytes, each
// under the Guard. The keys a batch's writes read are read first, in a few
// requests. Every read of a view is at one revision, so a listing never
// sees a job's index without its record.
type Journal struct {
	*store.Core
	cli  *clientv3.Client
	opts Options

	mu     sync.Mutex
	fenced error                // set once: every write fails with it
	views  map[*etcdTx]struct{} // reading now: compaction keeps their revisions
	// shadow is every key under the prefix (shadow.go), at etcd revision
	// shadowRev. The committer changes it (under mu) and reads it
	// (without: nobody else changes it); views clone it under mu.
	shadow    *stree
	shadowRev int64
	// writing counts the transactions under way, wrote those finished
	// (beginWrite, endWrite); under mu.
	writing int
	wrote   uint64
	// inflight is the changes of batches submitted and not yet committed
	// (pipelined: Submit), by key, with the batch that made the last;
	// flights is those batches, in order.
	inflight map[string]inflightChange
	flights  []*flight

	seq, seqTop uint64 // the last sequence given, and the top of the block reserved (committer only)
	lastSlot    uint64 // the highest slot used (slots.go); under mu
	jobsPrefix  string // PREFIX "jobs/": the keys place and where turn into slots

	stopCompact chan struct{}
	compacted   sync.WaitGroup
}

var (
	_ store.Journal    = (*Journal)(nil)
	_ store.Prefetcher = (*etcdTx)(nil)
	_ store.HeadReader = (*etcdTx)(nil)
	_ store.Peeker     = (*etcdTx)(nil)
)

// Etcd layout facts.
const (
	// etcdFormat is the prefix's format: "2" since unique keys and
	// cancelled jobs (records of version 3, their key ranges), "3" since
	// workflows (records of version 4, waiting jobs, batches), "4" since
	// the state indexes live in the leader's memory only (derived from the
	// records: shadow.go), "5" since jobs live in slots (slots.go; format
	// 4's jobs/MSGID keys stay readable). An older prefix is brought to "5"
	// when opened for writing, and a binary that knows only an older format
	// refuses it then, by name.
	etcdFormat = "5"
	// encryptedFormat is format 5 that may hold values encrypted at rest
	// (meta/keys names the keys): written when a journal is opened for
	// writing with keys, before any value is encrypted, so that a binary
	// that knows no such values refuses it rather than misread them. A
	// journal never encrypted stays at 5.
	encryptedFormat = "6"
	seqBlock        = 1 << 16 // sequences reserved at a time
	getChunk        = 32      // keys read in one request: a bound on the records held at once
	// Keys a scan reads at once: many of an index (small values, and
	// etcd 3.4 walks the whole range for each page), few of a bucket whose
	// values may be as large as a job.
	indexPage = 32768
	scanPage  = 64
)

var (
	formatKey = []byte("format")
	seqKey    = store.SeqKey
)

// CheckKeys checks keys against the journal under prefix, as Open does,
// without opening it (a standby told of new keys).
func CheckKeys(ctx context.Context, cli *clientv3.Client, prefix string, keys *store.Keyring) error {
	resp, err := cli.Get(ctx, prefix+string(store.BucketMeta)+"/"+string(store.KeysKey))
	if err != nil {
		return fmt.Errorf("journal on etcd %s: %w", prefix, err)
	}
	var v []byte
	if len(resp.Kvs) == 1 {
		v = resp.Kvs[0].Value
	}
	return store.CheckKeysValue(v, "on etcd "+prefix, keys)
}

// Open opens the journal under opts.Prefix on cli (which the caller
// closes, after the journal). A journal never written is made.
func Open(cli *clientv3.Client, opts Options) (*Journal, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	e := &Journal{cli: cli, opts: opts, stopCompact: make(chan struct{}), views: map[*etcdTx]struct{}{},
		inflight: map[string]inflightChange{}, jobsPrefix: opts.Prefix + string(store.BucketJobs) + "/"}
	kv := etcdKV{e}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(e.key(store.BucketMeta, formatKey)), clientv3.OpGet(e.key(store.BucketMeta, seqKey)),
		clientv3.OpGet(e.key(store.BucketMeta, store.KeysKey))).Commit()
	if err != nil {
		return nil, fmt.Errorf("journal on etcd %s: %w", opts.Prefix, err)
	}
	format, seq := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	var keys []byte
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
		keys = kvs[0].Value
	}
	switch {
	case len(format) == 1 && !slices.Contains([]string{"1", "2", "3", "4", etcdFormat, encryptedFormat}, string(format[0].Value)):
		return nil, fmt.Errorf("%w: journal on etcd %s has format %q; this binary knows %q", store.ErrTooNew, opts.Prefix, format[0].Value, encryptedFormat)
	case len(seq) == 1 && len(seq[0].Value) != 8:
		return nil, fmt.Errorf("%w: journal on etcd %s: its sequence is %d bytes, not 8", store.ErrCorrupt, opts.Prefix, len(seq[0].Value))
	case len(seq) == 1:
		e.seq = binary.BigEndian.Uint64(seq[0].Value)
		e.seqTop = e.seq
	}
	target := etcdFormat
	if opts.Keys != nil || (len(format) == 1 && string(format[0].Value) == encryptedFormat) {
		target = encryptedFormat
	}
	if err := store.CheckKeysValue(keys, "on etcd "+opts.Prefix, opts.Keys); err != nil {
		return nil, err
	}
	migrating := (len(format) == 0 || string(format[0].Value) != target) && !opts.ReadOnly
	if migrating {
		if err := e.migrate(target); err != nil {
			return nil, err
		}
	}
	warm := opts.Warm != nil && !opts.ReadOnly && !migrating // the migration's range deletes would empty its indexes
	if warm {
		if err := e.fromWarm(); err != nil {
			if errors.Is(err, store.ErrFenced) {
				return nil, err
			}
			warm = false
			if opts.OnWarmMissed != nil {
				opts.OnWarmMissed(err)
			}
		}
	}
	if opts.Warm != nil {
		opts.Warm.Stop()
	}
	if !warm {
		if err := e.loadShadow(); err != nil {
			return nil, err
		}
	}
	e.Core = store.StartCore("on etcd "+opts.Prefix, kv, store.CoreOptions{MaxBatch: opts.MaxBatch, MaxJobSize: opts.MaxJobSize,
		ReadOnly: opts.ReadOnly, OnCommit: opts.OnCommit, LazyDelay: opts.LazyDelay, Gather: opts.Gather,
		BulkLimit:     opts.MaxTxnOps / 5,                  // a done job's expiry deletes four keys
		MaxWrite:      opts.MaxRequestBytes - etcdOverhead, // one request
		MaxWriteKeys:  opts.MaxTxnOps,                      // one transaction
		LoadChunk:     4 * getChunk,                        // copied out of etcd, payloads with them: 4 requests at once
		Pipeline:      opts.Pipeline,
		HoldCompletes: opts.HoldCompletes,
		Keys:          opts.Keys,
		OnDamage:      opts.OnDamage,
	})
	if !opts.ReadOnly {
		if err := e.Resume(); err != nil {
			e.Close()
			return nil, err
		}
		if err := e.NoteKeys(); err != nil {
			e.Close()
			return nil, err
		}
		if err := e.ResumeRekey(); err != nil {
			e.Close()
			return nil, err
		}
	}
	if opts.CompactEvery > 0 && !opts.ReadOnly {
		e.compacted.Add(1)
		go e.compactLoop()
	}
	return e, nil
}

// migrate brings the prefix to etcdFormat in one guarded transaction:
// the state indexes an older format stored leave etcd (the shadow
// derives them from the records), and meta/format says the format.
func (e *Journal) migrate(format string) error {
	ops := []clientv3.Op{clientv3.OpPut(e.key(store.BucketMeta, formatKey), format)}
	for _, b := range derived {
		ops = append(ops, clientv3.OpDelete(e.key(b, nil), clientv3.WithRange(e.bucketEnd(b))))
	}
	ctx, cancel := e.ctx()
	defer cancel()
	resp, err := e.cli.Txn(ctx).If(e.opts.Guard...).Then(ops...).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("journal on etcd %s: bringing it to format %s: %w", e.opts.Prefix, format, err)
	case !resp.Succeeded:
		return fmt.Errorf("%w: journal on etcd %s: its leadership in etcd is gone", store.ErrFenced, e.opts.Prefix)
	}
	return nil
}

// String names the journal in logs.
func (e *Journal) String() string { return "etcd " + e.opts.Prefix }

// Compact answers errors.ErrUnsupported: etcd keeps its own space (the
// journal compacts etcd's history itself; etcdctl defrag returns the
// space to the disk).
func (e *Journal) Compact() (store.CompactStats, error) {
	return store.CompactStats{}, fmt.Errorf("%w: the journal in etcd needs no compaction by emq (the broker compacts etcd's history; defragment etcd with etcdctl defrag)", errors.ErrUnsupported)
}

// Close finishes the queued writes and stops. The client stays open.
func (e *Journal) Close() error {
	if !e.Stop() {
		close(e.stopCompact)
		e.compacted.Wait()
	}
	return nil
}

// Fenced returns the error that stopped the journal's writes, or nil.
func (e *Journal) Fenced() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fenced
}

func (e *Journal) fence(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenced == nil {
		e.fenced = err
	}
}

func (e *Journal) key(bucket, key []byte) string {
	var b strings.Builder
	b.Grow(len(e.opts.Prefix) + len(bucket) + 1 + len(key))
	b.WriteString(e.opts.Prefix)
	b.Write(bucket)
	b.WriteByte('/')
	b.Write(key)
	return b.String()
}

// bucketEnd is the end of a bucket's key range ('0' follows '/').
func (e *Journal) bucketEnd(bucket []byte) string { return e.opts.Prefix + string(bucket) + "0" }

// ctx bounds a request by Timeout, and asks for a member with a leader:
// one without (cut off from the others, or during an election) refuses
// the request at once (ErrNoLeader, before it is proposed: refused), not
// after the timeout with its outcome unknown.
func (e *Journal) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(clientv3.WithRequireLeader(context.Background()), e.opts.Timeout)
}

// compactLoop compacts etcd's history every CompactEvery to the revision
// seen one period before, or to the oldest revision a view of this
// journal still reads at (a Load may take minutes): the revisions the
// journal's churn made are freed, and no read of its own loses its
// revision. Compaction is cluster-wide: another user of the cluster that
// compacts further breaks long reads.
//
// Four times a period it also moves the shadow's revision, where views
// read, up to etcd's latest while the journal writes nothing: nobody else
// writes its keys, so they are the same there. A journal that sits idle
// on a cluster that others write (shards sharing one etcd) then reads at
// a recent revision, which their compaction, a period behind, has not
// reached.
func (e *Journal) compactLoop() {
	defer e.compacted.Done()
	tick := time.NewTicker(max(e.opts.CompactEvery/4, time.Millisecond))
	defer tick.Stop()
	var last, done int64
	for n := 1; ; n++ {
		select {
		case <-e.stopCompact:
			return
		case <-tick.C:
		}
		ctx, cancel := e.ctx()
		if n%4 == 0 {
			to := min(last, e.oldestView())
			e.mu.Lock()
			to = min(to, e.shadowRev) // a view begun now reads at the shadow's revision
			e.mu.Unlock()
			if to > done {
				_, err := e.cli.Compact(ctx, to)
				if err == nil || errors.Is(err, rpctypes.ErrCompacted) { // compacted further already: fine
					done = to
				}
			}
		}
		e.mu.Lock()
		idle, wrote := e.writing == 0, e.wrote
		e.mu.Unlock()
		resp, err := e.cli.Get(ctx, e.key(store.BucketMeta, formatKey))
		cancel()
		if err != nil {
			continue
		}
		if n%4 == 0 {
			last = resp.Header.Revision
		}
		e.mu.Lock()
		if idle && e.writing == 0 && e.wrote == wrote {
			e.shadowRev = max(e.shadowRev, resp.Header.Revision)
		}
		e.mu.Unlock()
	}
}

// beginWrite and endWrite bracket each transaction the journal sends:
// while one is under way the shadow's revision stays where its commits
// put it (compactLoop).
func (e *Journal) beginWrite() {
	e.mu.Lock()
	e.writing++
	e.mu.Unlock()
}

func (e *Journal) endWrite() {
	e.mu.Lock()
	e.writing--
	e.wrote++
	e.mu.Unlock()
}

// oldestView is the oldest revision a view reads at now (max: none).
func (e *Journal) oldestView() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	oldest := int64(math.MaxInt64)
	for t := range e.views {
		if t.rev > 0 {
			oldest = min(oldest, t.rev)
		}
	}
	return oldest
}

// pageOf is how many keys of bucket a scan reads at once.
func pageOf(bucket []byte) int64 {
	switch string(bucket) {
	case string(store.BucketPending), string(store.BucketDead), string(store.BucketDone), string(store.BucketResultExp),
		string(store.BucketCancelled), string(store.BucketUniqueExp), string(store.BucketWaiting), string(store.BucketAfter),
		string(store.BucketAfterB), string(store.BucketSettling):
		return indexPage
	}
	return scanPage
}

// etcdKV is an Etcd's storage.
type etcdKV struct{ e *Journal }

func (k etcdKV) View(fn func(t store.Tx) error) error {
	t := &etcdTx{e: k.e}
	k.e.mu.Lock()
	t.shadow, t.rev = k.e.shadow.Clone(), k.e.shadowRev
	k.e.views[t] = struct{}{}
	k.e.mu.Unlock()
	defer func() {
		k.e.mu.Lock()
		delete(k.e.views, t)
		k.e.mu.Unlock()
	}()
	if err := fn(t); err != nil {
		return err
	}
	return t.Err()
}

// Update is Submit, waited for.
func (k etcdKV) Update(fn func(t store.Tx, mark func() error) error, durable bool) error {
	return k.Submit(fn, durable)()
}

// Submit runs fn on an overlay of the batch's changes, then commits them
// in the background, in guarded transactions within etcd's limits: in
// waves, each wave's transactions at once. Writes that touch (read or
// change) a common key share a transaction, or follow in a later wave,
// so no write's outcome rests on another that might fail without it.
//
// Batches overlap (store.Pipeliner): a batch reads the changes of those
// still committing, and one that touched a key they change waits for
// them before it commits, and fails if any of them failed.
func (k etcdKV) Submit(fn func(t store.Tx, mark func() error) error, _ bool) (wait func() error) {
	e := k.e
	outcome := func(err error) func() error { return func() error { return err } }
	if err := e.Fenced(); err != nil {
		return outcome(err)
	}
	t := &etcdTx{e: e, write: true, over: map[string]overlay{}, cache: map[string][]byte{}, touched: map[string]bool{}, shadow: e.shadow}
	t.waves = []wave{{keys: map[string]int{}}}
	if err := fn(t, t.mark); err != nil {
		return outcome(err)
	}
	if e.opts.Pipeline <= 1 { // one batch at a time: none in flight to read from or wait for
		return outcome(e.commitBatch(t, nil))
	}
	f := &flight{done: make(chan struct{})}
	deps := map[*flight]bool{}
	e.mu.Lock()
	for _, w := range t.waves {
		for key := range w.keys {
			if c, ok := e.inflight[key]; ok {
				deps[c.by] = true
			}
		}
	}
	for key, o := range t.over {
		e.inflight[key] = inflightChange{overlay: o, by: f}
	}
	e.flights = append(e.flights, f)
	e.mu.Unlock()
	go func() {
		f.err = e.commitBatch(t, deps)
		e.mu.Lock()
		for key := range t.over {
			if e.inflight[key].by == f {
				delete(e.inflight, key)
			}
		}
		e.flights = slices.DeleteFunc(e.flights, func(g *flight) bool { return g == f })
		e.mu.Unlock()
		close(f.done)
	}()
	return func() error { <-f.done; return f.err }
}

// flight is a batch submitted and committing.
type flight struct {
	done chan struct{} // closed once committed, or failed
	err  error
}

// inflightChange is a change of a batch still committing.
type inflightChange struct {
	overlay
	by *flight
}

// commitBatch commits t's waves once the batches it depends on are
// committed.
func (e *Journal) commitBatch(t *etcdTx, deps map[*flight]bool) error {
	for d := range deps {
		<-d.done
		if err := d.err; err != nil {
			var p *store.PartialError
			if errors.As(err, &p) {
				err = p.Err
			}
			return fmt.Errorf("a batch it read from failed: %w", err)
		}
	}
	ok := make([]bool, t.nwrites)
	for n, w := range t.waves {
		if err := e.commitWave(w, ok); err != nil {
			if errors.Is(err, store.ErrFenced) {
				e.fence(err)
			}
			if n == 0 && !slices.Contains(ok, true) {
				return err
			}
			return &store.PartialError{OK: ok, Err: err}
		}
	}
	return nil
}

// drain waits until every batch submitted is committed (or failed): a
// scan of a batch reads the shadow and etcd as they are.
func (e *Journal) drain() {
	e.mu.Lock()
	fs := slices.Clone(e.flights)
	e.mu.Unlock()
	for _, f := range fs {
		<-f.done
	}
}

// commitWave commits a wave's transactions at once, and marks the writes
// of those that succeed.
func (e *Journal) commitWave(w wave, ok []bool) error {
	errs := make([]error, len(w.chunks))
	// Each chunk's operations, each key once, and as sent to etcd: the
	// jobs in their slots.
	ops, placed, slots := make([][]clientv3.Op, len(w.chunks)), make([][]clientv3.Op, len(w.chunks)), make([]map[string]uint64, len(w.chunks))
	for i, c := range w.chunks {
		ops[i] = lastOfEach(c.ops)
		placed[i], slots[i] = e.place(ops[i])
	}
	var wg sync.WaitGroup
	for i, c := range w.chunks {
		if len(placed[i]) == 0 && len(e.opts.Guard) == 0 {
			e.applyShadow(ops[i], nil, 0)
			e.applyShadow(c.sops, nil, 0)
			continue
		}
		// A chunk that changes nothing (a duplicate, a job not found)
		// still asks the guard: an answer that gates an ACK comes only
		// from the leader.
		wg.Go(func() {
			e.beginWrite()
			defer e.endWrite()
			ctx, cancel := e.ctx()
			defer cancel()
			resp, err := e.cli.Txn(ctx).If(e.opts.Guard...).Then(placed[i]...).Commit()
			if errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
				switch applied, known, rev := e.appliedAnyway(placed[i]); {
				case !known:
					err = fmt.Errorf("etcd answered %v, and its keys do not say whether it applied the transaction", rpctypes.Error(err))
				case applied: // stored: it gates its ACK like any other
					e.applyShadow(ops[i], slots[i], rev)
					e.applyShadow(c.sops, nil, rev)
					return
				}
			}
			if err == nil && resp.Succeeded {
				e.applyShadow(ops[i], slots[i], resp.Header.Revision)
				e.applyShadow(c.sops, nil, resp.Header.Revision)
			}
			switch {
			case refused(err):
				// Nothing of it was applied: its writes fail, the broker
				// answers unavailable and goes on, as on a full disk.
				errs[i] = fmt.Errorf("etcd refused the write: %w", rpctypes.Error(err))
			case err != nil:
				// Whether etcd applied it is unknown: the broker stops,
				// and whoever leads next loads what etcd holds.
				errs[i] = fmt.Errorf("%w: a write to etcd failed, its outcome unknown: %v", store.ErrFenced, err)
			case !resp.Succeeded:
				errs[i] = fmt.Errorf("%w: its leadership in etcd is gone", store.ErrFenced)
			}
		})
	}
	wg.Wait()
	for i, c := range w.chunks {
		if errs[i] == nil {
			for _, n := range c.writes {
				ok[n] = true
			}
		}
	}
	return errors.Join(errs...)
}

// appliedAnyway says whether a transaction etcd answered with ErrNoSpace
// was applied (known false: its keys cannot tell). etcd checks its quota
// before a transaction enters the Raft log and again when it applies it;
// one that passed the first and fails the second is applied all the
// same, and answered ErrNoSpace (etcdserver/apply: quotaApplierV3). A
// transaction is applied whole or not at all: every put's value is there
// and every deleted key gone, or none.
func (e *Journal) appliedAnyway(ops []clientv3.Op) (applied, known bool, rev int64) {
	done, undone := 0, 0
	for _, op := range ops {
		if (!op.IsPut() && !op.IsDelete()) || len(op.RangeBytes()) > 0 {
			return false, false, 0
		}
		ctx, cancel := e.ctx()
		resp, err := e.cli.Get(ctx, string(op.KeyBytes()))
		cancel()
		if err != nil {
			return false, false, 0
		}
		rev = max(rev, resp.Header.Revision)
		var there bool
		if op.IsPut() {
			there = len(resp.Kvs) == 1 && bytes.Equal(resp.Kvs[0].Value, op.ValueBytes())
		} else {
			there = len(resp.Kvs) == 0
		}
		if there {
			done++
		} else {
			undone++
		}
	}
	switch {
	case undone == 0:
		return true, true, rev
	case done == 0:
		return false, true, 0
	}
	return false, false, 0
}

// refused reports whether etcd refused a request outright, so that none
// of it was applied: its space quota reached, a limit, a permission, no
// leader (etcd's server checks that before it handles the request).
func refused(err error) bool {
	err = rpctypes.Error(err)
	for _, r := range []error{rpctypes.ErrNoSpace, rpctypes.ErrTooManyOps, rpctypes.ErrRequestTooLarge,
		rpctypes.ErrDuplicateKey, rpctypes.ErrPermissionDenied, rpctypes.ErrNoLeader} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// lastOfEach keeps each key's last operation (etcd refuses a transaction
// that names a key twice); in one transaction, they come to the same.
func lastOfEach(ops []clientv3.Op) []clientv3.Op {
	last := make(map[string]int, len(ops))
	for i, op := range ops {
		last[string(op.KeyBytes())] = i
	}
	if len(last) == len(ops) {
		return ops
	}
	out := make([]clientv3.Op, 0, len(last))
	for i, op := range ops {
		if last[string(op.KeyBytes())] == i {
			out = append(out, op)
		}
	}
	return out
}

// overlay is a batch's change of one key.
type overlay struct {
	val []byte
	del bool
}

// chunk is the writes of a batch committed in one transaction.
type chunk struct {
	ops    []clientv3.Op
	sops   []clientv3.Op // the shadow's alone (derived indexes), in order
	bytes  int
	writes []int // their places in the batch
	// fresh and freed count, at least, the new jobs it puts and the
	// stored jobs in slots it deletes: place pairs them, one operation
	// for both (slots.go).
	fresh, freed int
}

// opsAfter is how many operations c carries at most, once placed, with
// a write of ops more operations, fresh new jobs and freed slots.
func (c *chunk) opsAfter(ops, fresh, freed int) int {
	return len(c.ops) + ops - min(c.fresh+fresh, c.freed+freed)
}

// pairs is how many of a write's fresh jobs or freed slots c would pair.
func (c *chunk) pairs(fresh, freed int) int {
	return min(c.fresh+fresh, c.freed+freed) - min(c.fresh, c.freed)
}

// wave is chunks that touch no common key, committed at once.
type wave struct {
	chunks []chunk
	keys   map[string]int // key touched -> its chunk
	wide   bool           // one write that scanned: alone in its wave
}

// etcdTx is a view (reads at one revision) or a batch being applied
// (reads at the latest revision, through the batch's own changes).
type etcdTx struct {
	e      *Journal
	write  bool
	shadow *stree // what etcd holds (a view: a clone, at rev)
	rev    int64  // a view's revision
	first  error

	over   map[string]overlay // the batch's changes so far
	cache  map[string][]byte  // read from etcd this batch (nil: no such key)
	cached int                // bytes of values in cache

	// The write being applied: its operations, what it touched (read or
	// changed), whether it scanned, its bytes, and how to take it back.
	ops     []clientv3.Op
	sops    []clientv3.Op // its changes of derived indexes: the shadow's alone
	touched map[string]bool
	wide    bool
	size    int
	undo    []undo
	// fresh and freed are the write's new jobs and the slots it frees, as
	// chunk counts them.
	fresh, freed int

	waves   []wave
	nwrites int
}

type undo struct {
	key  string
	prev overlay
	had  bool
}

func (t *etcdTx) Err() error { return t.first }

func (t *etcdTx) fail(err error) {
	if t.first == nil {
		t.first = fmt.Errorf("journal on etcd %s: %w", t.e.opts.Prefix, err)
	}
}

// readOpts pins a view's reads to its revision.
func (t *etcdTx) readOpts(opts ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev > 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	return opts
}

func (t *etcdTx) Get(bucket, key []byte) []byte {
	k := t.e.key(bucket, key)
	if v, ok := t.known(k); ok { // most of a batch's reads: no request, no maps
		if t.write {
			t.touched[k] = true
		}
		return v
	}
	return t.Gets(bucket, [][]byte{key})[0]
}

// gets reads what the batch has not changed or read already, getChunk
// keys a request, a few requests at once.
func (t *etcdTx) Gets(bucket []byte, keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	var want []string
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		key := t.e.key(bucket, k)
		if _, ok := t.known(key); !ok && !seen[key] {
			seen[key] = true
			want = append(want, key)
		}
	}
	got := make(map[string][]byte, len(want))
	for i, v := range t.fetch(want, true) {
		got[want[i]] = v
	}
	for i, k := range keys {
		key := t.e.key(bucket, k)
		var ok bool
		if out[i], ok = t.known(key); !ok {
			out[i] = got[key]
		}
		if t.write {
			t.touched[key] = true
		}
	}
	return out
}

// prefetch reads the keys a batch's writes will read, in a few requests
// at once, before the first write runs.
func (t *etcdTx) Prefetch(keys []store.Key) {
	want := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		key := t.e.key(k.Bucket, k.Key)
		if seen[key] {
			continue
		}
		seen[key] = true
		if it, ok := t.lookup(key); !ok || it.whole || !k.Whole && it.val != nil {
			continue // the shadow answers
		}
		want = append(want, key)
	}
	t.fetch(want, false)
}

// known returns what the transaction knows of key without a request: the
// batch's change, what it read, or what the shadow keeps whole (or that
// etcd does not hold it).
func (t *etcdTx) known(key string) ([]byte, bool) {
	if v, ok := t.mine(key); ok {
		return v, true
	}
	it, ok := t.lookup(key)
	switch {
	case !ok:
		return nil, true
	case it.whole:
		return it.val, true
	}
	return nil, false
}

// mine returns the batch's change of key, or what it read of it.
func (t *etcdTx) mine(key string) ([]byte, bool) {
	if o, ok := t.over[key]; ok {
		if o.del {
			return nil, true
		}
		return o.val, true
	}
	v, ok := t.cache[key]
	return v, ok
}

// fetch reads keys, a few requests at once, and returns their values
// (nil: no such key) when collect is set. A batch keeps what it read for
// its later writes, up to cacheBudget bytes of values; a view keeps
// nothing. Reading ahead (no collect), it stops once the budget is
// spent: what it holds is bounded by the budget and the requests out.
func (t *etcdTx) fetch(keys []string, collect bool) [][]byte {
	var out [][]byte
	if collect {
		out = make([][]byte, len(keys))
	}
	if len(keys) == 0 || t.first != nil {
		return out
	}
	var mu sync.Mutex
	keep := func(at int, vals [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		if collect {
			copy(out[at:], vals)
		}
		if !t.write {
			return
		}
		for i, v := range vals {
			if t.cached+len(v) <= cacheBudget {
				t.cache[keys[at+i]] = v
				t.cached += len(v)
			}
		}
	}
	at := 0
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4) // requests at once
	for at < len(keys) {
		n := min(len(keys)-at, getChunk)
		from := at
		at += n
		slots <- struct{}{}
		mu.Lock()
		spent := !collect && t.cached >= cacheBudget
		mu.Unlock()
		if spent {
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			vals, err := t.read(keys[from : from+n])
			if err != nil {
				mu.Lock()
				t.fail(err)
				mu.Unlock()
				return
			}
			keep(from, vals)
		})
	}
	wg.Wait()
	return out
}

// cacheBudget bounds the values a batch keeps of what it read ahead;
// beyond it a write reads what it needs again, one key at a time.
const cacheBudget = 32 << 20

// read gets keys in one transaction; a job's from its slot.
func (t *etcdTx) read(keys []string) ([][]byte, error) {
	ops := make([]clientv3.Op, len(keys))
	ids := make([][]byte, len(keys))
	for i, k := range keys {
		var at string
		at, ids[i] = t.where(k)
		ops[i] = clientv3.OpGet(at, t.readOpts()...)
	}
	ctx, cancel := t.e.ctx()
	defer cancel()
	resp, err := t.e.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		switch {
		case len(kvs) != 1:
		case ids[i] == nil:
			out[i] = kvs[0].Value
		default:
			id, rec, err := unwrapJob(kvs[0].Value)
			if err == nil && !bytes.Equal(id, ids[i]) {
				err = fmt.Errorf("%w: slot %s holds job %q, not %q", store.ErrCorrupt, kvs[0].Key, id, ids[i])
			}
			if err != nil {
				return nil, err
			}
			out[i] = rec
		}
	}
	return out, nil
}

// change records a change of key; a derived index's goes to the shadow
// alone.
func (t *etcdTx) change(bucket []byte, key string, o overlay, op clientv3.Op, size int) {
	prev, had := t.over[key]
	t.undo = append(t.undo, undo{key, prev, had})
	t.over[key] = o
	t.touched[key] = true
	if isDerived(bucket) {
		t.sops = append(t.sops, op)
		return
	}
	t.ops = append(t.ops, op)
	t.size += size
}

func (t *etcdTx) Put(bucket, key, val []byte) error {
	k := t.e.key(bucket, key)
	if bytes.Equal(bucket, store.BucketJobs) && t.slotted(k) == 0 {
		t.fresh++
	}
	t.change(bucket, k, overlay{val: val}, clientv3.OpPut(k, string(val)), len(k)+len(val)+16)
	return nil
}

func (t *etcdTx) Delete(bucket, key []byte) error {
	k := t.e.key(bucket, key)
	if bytes.Equal(bucket, store.BucketJobs) && t.slotted(k) == 1 {
		t.freed++
	}
	t.change(bucket, k, overlay{del: true}, clientv3.OpDelete(k), len(k)+16)
	return nil
}

// slotted says, for a job's key the batch has not changed yet, whether
// it is surely not stored (0) or surely stored in a slot (1), as place
// will find it; else -1. For counting only: place decides.
func (t *etcdTx) slotted(key string) int {
	if _, ok := t.over[key]; ok {
		return -1
	}
	switch it, ok := t.lookup(key); {
	case !ok:
		return 0
	case it.slot != 0: // the shadow's (a batch in flight gives none)
		return 1
	}
	return -1
}

// mark ends the write being applied: it joins the chunk of the current
// wave whose keys it touched, or any with room when it touched none, or
// starts the next wave. A write that cannot fit in one transaction is
// taken back and refused.
func (t *etcdTx) mark() error {
	n := t.nwrites
	t.nwrites++
	defer func() {
		t.ops, t.sops, t.wide, t.size, t.undo, t.fresh, t.freed = nil, nil, false, 0, t.undo[:0], 0, 0
		clear(t.touched)
	}()
	maxOps, maxBytes := t.e.opts.MaxTxnOps, t.e.opts.MaxRequestBytes-etcdOverhead
	if len(t.ops) > maxOps || t.size > maxBytes {
		for i := len(t.undo) - 1; i >= 0; i-- {
			u := t.undo[i]
			if u.had {
				t.over[u.key] = u.prev
			} else {
				delete(t.over, u.key)
			}
		}
		return fmt.Errorf("%w: one change of %d etcd operations and %d bytes is over the limit of a request (%d operations, %d bytes)",
			store.ErrTooLarge, len(t.ops), t.size, maxOps, maxBytes)
	}
	w := &t.waves[len(t.waves)-1]
	target := -1 // the chunk it must join
	fits := func(c *chunk) bool {
		return c.opsAfter(len(t.ops), t.fresh, t.freed) <= maxOps && c.bytes+t.size <= maxBytes
	}
	newWave := w.wide || t.wide && len(w.chunks) > 0
	for k := range t.touched {
		if c, ok := w.keys[k]; ok && !newWave {
			if target >= 0 && target != c {
				newWave = true // it ties two chunks: it waits for both
			}
			target = c
		}
	}
	if !newWave && target >= 0 && !fits(&w.chunks[target]) {
		newWave = true
	}
	if newWave {
		t.waves = append(t.waves, wave{keys: map[string]int{}})
		w, target = &t.waves[len(t.waves)-1], -1
	}
	if target < 0 && t.fresh+t.freed > 0 {
		// A new job joins a chunk that frees a slot, an ended job one
		// that puts a new job: place pairs them.
		for i := range w.chunks {
			if c := &w.chunks[i]; c.pairs(t.fresh, t.freed) > 0 && fits(c) {
				target = i
				break
			}
		}
	}
	if target < 0 {
		if len(w.chunks) == 0 || !fits(&w.chunks[len(w.chunks)-1]) {
			w.chunks = append(w.chunks, chunk{})
		}
		target = len(w.chunks) - 1
	}
	c := &w.chunks[target]
	c.ops = append(c.ops, t.ops...)
	c.sops = append(c.sops, t.sops...)
	c.fresh += t.fresh
	c.freed += t.freed
	c.bytes += t.size
	c.writes = append(c.writes, n)
	for k := range t.touched {
		w.keys[k] = target
	}
	w.wide = w.wide || t.wide
	return nil
}

// nextSeq hands out sequences from a block reserved in meta/seq. The
// reservation is its own guarded transaction, committed before any
// sequence of the block is used: a leader after this one starts above
// every sequence this one could have stored.
func (t *etcdTx) NextSeq() (uint64, error) {
	e := t.e
	if e.seq+1 >= e.seqTop {
		top := e.seq + 1 + seqBlock
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], top)
		ctx, cancel := e.ctx()
		e.beginWrite()
		resp, err := e.cli.Txn(ctx).If(e.opts.Guard...).Then(clientv3.OpPut(e.key(store.BucketMeta, seqKey), string(v[:]))).Commit()
		if err == nil && resp.Succeeded {
			e.applyShadow([]clientv3.Op{clientv3.OpPut(e.key(store.BucketMeta, seqKey), string(v[:]))}, nil, resp.Header.Revision)
		}
		e.endWrite()
		cancel()
		switch {
		case err != nil:
			return 0, fmt.Errorf("journal on etcd %s: reserving sequences: %w", e.opts.Prefix, err)
		case !resp.Succeeded:
			err := fmt.Errorf("%w: its leadership in etcd is gone", store.ErrFenced)
			e.fence(err)
			return 0, err
		}
		e.seqTop = top
	}
	e.seq++
	return e.seq, nil
}

func (t *etcdTx) Release([]byte) {}

// Damaged is none: etcd checks its own bytes (its log is CRC'd, and its
// bbolt too on the way), and answers with an error, not a value, when it
// cannot read one.
func (t *etcdTx) Damaged() []store.Damage { return nil }

// Raw is Get: nothing here is checked by the journal.
func (t *etcdTx) Raw(bucket, key []byte) []byte { return t.Get(bucket, key) }

// scan reads the bucket's range a page at a time; a batch's own changes
// are merged in.
func (t *etcdTx) Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	if t.first != nil {
		return t.first
	}
	if t.write {
		t.wide = true // what it read is a range: its write is alone in its wave
		t.e.drain()   // and sees what the batches before it committed
	}
	start, end := t.e.key(bucket, from), t.e.bucketEnd(bucket)
	page := t.etcdPage
	switch {
	case isDerived(bucket):
		page = t.shadowPage
	case bytes.Equal(bucket, store.BucketJobs):
		page = t.jobsPage
	}
	strip := len(t.e.opts.Prefix) + len(bucket) + 1
	var mine []string // the batch's changed keys in range, in order
	for k := range t.over {
		if k >= start && k < end {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	emit := func(k string, v []byte) (bool, error) { return fn([]byte(k[strip:]), v) }
	// flushMine emits the batch's keys before limit ("" = all).
	flushMine := func(limit string) (bool, error) {
		for len(mine) > 0 && (limit == "" || mine[0] < limit) {
			k := mine[0]
			mine = mine[1:]
			if o := t.over[k]; !o.del {
				if more, err := emit(k, o.val); !more || err != nil {
					return false, err
				}
			}
		}
		return true, nil
	}
	for {
		kvs, more, err := page(start, end, pageOf(bucket))
		if err != nil {
			t.fail(err)
			return t.first
		}
		for _, kv := range kvs {
			if more, err := flushMine(kv.key); !more || err != nil {
				return err
			}
			if len(mine) > 0 && mine[0] == kv.key { // changed by the batch
				continue
			}
			if more, err := emit(kv.key, kv.val); !more || err != nil {
				return err
			}
		}
		if !more {
			_, err := flushMine("")
			return err
		}
		start = kvs[len(kvs)-1].key + "\x00"
	}
}

// skv is a key (whole, with the prefix) and its value.
type skv struct {
	key string
	val []byte
}

// etcdPage reads up to limit keys of [start, end) from etcd.
func (t *etcdTx) etcdPage(start, end string, limit int64) ([]skv, bool, error) {
	ctx, cancel := t.e.ctx()
	defer cancel()
	resp, err := t.e.cli.Get(ctx, start, t.readOpts(clientv3.WithRange(end), clientv3.WithLimit(limit))...)
	if err != nil {
		return nil, false, err
	}
	out := make([]skv, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = skv{string(kv.Key), kv.Value}
	}
	return out, resp.More, nil
}

// shadowPage reads up to limit keys of [start, end) from the shadow,
// which keeps a derived index whole. A page is copied out: fn may write
// (NextSeq changes the shadow) between pages.
func (t *etcdTx) shadowPage(start, end string, limit int64) ([]skv, bool, error) {
	if t.write {
		t.e.mu.Lock()
		defer t.e.mu.Unlock()
	}
	var out []skv
	more := false
	t.shadow.AscendRange(&sitem{key: t.e.rel(start)}, &sitem{key: t.e.rel(end)}, func(it *sitem) bool {
		if int64(len(out)) == limit {
			more = true
			return false
		}
		out = append(out, skv{t.e.opts.Prefix + it.key, it.val})
		return true
	})
	return out, more, nil
}

// jobsPage reads up to limit jobs of [start, end): their msgids from the
// shadow, their records from their slots (or format 4's keys).
func (t *etcdTx) jobsPage(start, end string, limit int64) ([]skv, bool, error) {
	kvs, more, _ := t.shadowPage(start, end, limit)
	if len(kvs) == 0 {
		return nil, more, nil
	}
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.key
	}
	vals, err := t.read(keys)
	if err != nil {
		return nil, false, err
	}
	for i := range kvs {
		kvs[i].val = vals[i]
	}
	return kvs, more, nil
}
