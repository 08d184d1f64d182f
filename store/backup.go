package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"time"
)

// Backups: a journal's every key, as one point in time, in a stream of
// its own format that any backend restores (a group on etcd moves to one
// broker's bbolt file and back). Backup reads in one read transaction of
// the backend, which sees one moment however long it reads (boltstore:
// a clone of the log's memtable over a bbolt read transaction, with no
// checkpoint needed first; etcdstore: one revision, which compaction
// keeps while the view reads): every write durable before it began (every
// job ACKed) is in it, and none that came later.
//
// The stream:
//
//	"EMQ-BACKUP 1\n"
//	uvarint length, the header (JSON: BackupHeader)
//	records: 'r', then bucket, key and value, each a uvarint length and its bytes
//	'e', uvarint record count, then the SHA-256 of every byte before it
//
// The values are as the journal's logic reads them (not a backend's
// sealed form), but encrypted as stored when the journal is encrypted at
// rest (encrypt.go): a backup of such a journal is format 2, its header
// names the keys, and it restores only into a journal given them. Of the
// meta bucket only the job sequence goes, which the restoring backend
// takes as its own, and the names of the keys (meta/keys). Restore checks
// the whole stream (its magic, header, every record's form and the
// checksum; every encrypted value against the keys) before it writes
// anything.

// BackupMagic starts every backup.
const BackupMagic = "EMQ-BACKUP 1\n"

// BackupFormat is the version of the stream Backup writes; a backup of
// an encrypted journal is BackupEncrypted, which an older binary refuses.
const (
	BackupFormat    = 1
	BackupEncrypted = 2
)

// Buckets are every bucket of the layout, in the order a backup holds
// them.
var Buckets = [][]byte{BucketMeta, BucketJobs, BucketPending, BucketDead, BucketResults, BucketResultExp,
	BucketSchedules, BucketQueues, BucketDone, BucketDamaged, BucketCancelled, BucketUnique, BucketUniqueExp,
	BucketWaiting, BucketAfter, BucketBatches, BucketAfterB, BucketSettling, BucketTenants, BucketLimiters}

// SeqKey is the job sequence's key in the meta bucket, in every backend.
var SeqKey = []byte("seq")

// BackupHeader says what a backup is.
type BackupHeader struct {
	Format  int       `json:"format"`
	Created time.Time `json:"created"`
	MadeBy  string    `json:"made_by"` // the program and broker that made it
	Journal string    `json:"journal"` // the journal it was taken from
	// Keys names the keys its values are encrypted with (format 2).
	Keys []string `json:"keys,omitempty"`
	// Pace, if set, bounds the bytes a second Backup writes, so that a
	// serving broker keeps its share of the machine (not written).
	Pace int64 `json:"-"`
}

// BackupStats is what a backup or a restore held.
type BackupStats struct {
	Header  BackupHeader `json:"header"`
	Records int          `json:"records"`
	Jobs    int          `json:"jobs"`
	Bytes   int64        `json:"bytes"`
	Sum     string       `json:"sha256"`
}

// ErrBadBackup is a backup stream that is not whole or not ours: damaged,
// cut short, or of a format this binary does not read.
var ErrBadBackup = errors.New("not a whole EMQ backup")

// Backuper is a journal that can back itself up and restore a backup.
// Core is one: every backend is.
type Backuper interface {
	Backup(w io.Writer, h BackupHeader) (BackupStats, error)
	Restore(r io.ReadSeeker, replace bool) (BackupStats, error)
	// Empty reports whether the journal holds nothing but its own meta.
	Empty() (bool, error)
}

var _ Backuper = (*Core)(nil)

var recordTag = []byte{'r'}

// pacedStep is how often a backup looks at its pace and whether its
// journal closes, in bytes.
const pacedStep = 1 << 20

// pace holds a backup that has written cw.n bytes since began back to
// pace bytes a second (0: no pace), flushing what it wrote first; it
// fails with ErrClosed once the journal begins to close, which would
// otherwise wait for the backup's read.
func (jn *Core) pace(cw *countWriter, pace int64, began time.Time, pause *time.Timer) error {
	if pace > 0 {
		if ahead := time.Duration(float64(cw.n)/float64(pace)*float64(time.Second)) - time.Since(began); ahead > 0 {
			if cw.err == nil {
				cw.err = cw.w.Flush()
			}
			pause.Reset(ahead)
			select {
			case <-pause.C:
			case <-jn.stopping:
				pause.Stop()
			}
		}
	}
	select {
	case <-jn.stopping:
		return fmt.Errorf("%w: journal %s closed during the backup", ErrClosed, jn.name)
	default:
		return nil
	}
}

// countWriter counts and hashes what it writes.
type countWriter struct {
	w   *bufio.Writer
	h   hash.Hash
	n   int64
	err error
}

func (c *countWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	_, c.err = c.w.Write(p)
	c.h.Write(p)
	c.n += int64(len(p))
}

func (c *countWriter) field(p []byte) {
	var l [binary.MaxVarintLen64]byte
	c.write(l[:binary.PutUvarint(l[:], uint64(len(p)))])
	c.write(p)
}

// Backup implements Backuper: it writes the journal's every key to w, as
// one moment, and returns what it wrote. A journal closing meanwhile
// ends it with ErrClosed rather than wait for it (its read holds the
// storage open).
func (jn *Core) Backup(w io.Writer, h BackupHeader) (BackupStats, error) {
	h.Format = BackupFormat
	if h.Created.IsZero() {
		h.Created = time.Now()
	}
	if h.Journal == "" {
		h.Journal = jn.name
	}
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20), h: sha256.New()}
	st := BackupStats{}
	began, paced := time.Now(), int64(0)
	pause := time.NewTimer(time.Hour)
	pause.Stop()
	err := jn.view(func(wt Tx) error {
		t := rawTx(wt) // the values as stored: encrypted ones stay so
		keys, err := readKeysRecord(t)
		if err != nil {
			return err
		}
		if h.Keys = keys.names(); len(h.Keys) > 0 {
			h.Format = BackupEncrypted
		}
		head, err := json.Marshal(h)
		if err != nil {
			return err
		}
		cw.write([]byte(BackupMagic))
		cw.field(head)
		st.Header = h
		for _, b := range Buckets {
			err := t.Scan(b, nil, func(k, v []byte) (bool, error) {
				if bytes.Equal(b, BucketMeta) && !bytes.Equal(k, SeqKey) && !bytes.Equal(k, KeysKey) {
					return true, nil // the backend's own (schema, format)
				}
				cw.write(recordTag)
				cw.field(b)
				cw.field(k)
				cw.field(v)
				st.Records++
				if cw.n >= paced+pacedStep {
					paced = cw.n
					if err := jn.pace(cw, h.Pace, began, pause); err != nil {
						return false, err
					}
				}
				if bytes.Equal(b, BucketJobs) {
					st.Jobs++
				}
				t.Release(v)
				return cw.err == nil, cw.err
			})
			if err != nil {
				return err
			}
		}
		// A value that fails its checksum was given as missing: the
		// backup would lack it without a word. The view's end moves it
		// aside (to the damaged bucket, which a backup keeps).
		if ds := wt.Damaged(); len(ds) > 0 {
			return fmt.Errorf("%w: journal %s: %d stored values fail their checksums (the first: %s); they are being moved aside (emq journal check lists them): back up again",
				ErrDamaged, jn.name, len(ds), ds[0])
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	tail := binary.AppendUvarint([]byte{'e'}, uint64(st.Records))
	cw.write(tail)
	sum := cw.h.Sum(nil) // of every byte before it
	cw.write(sum)
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	st.Bytes, st.Sum = cw.n, fmt.Sprintf("%x", sum)
	return st, cw.err
}

// backupReader reads a backup stream, hashing what it reads.
type backupReader struct {
	r   *bufio.Reader
	h   hash.Hash
	off int64
	one [1]byte // byte's, hashed without an allocation
}

func (br *backupReader) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrBadBackup, br.off, fmt.Sprintf(format, args...))
}

func (br *backupReader) byte() (byte, error) {
	c, err := br.r.ReadByte()
	if err != nil {
		return 0, br.fail("cut short (%v)", err)
	}
	br.one[0] = c
	br.h.Write(br.one[:])
	br.off++
	return c, nil
}

func (br *backupReader) uvarint() (uint64, error) {
	var buf [binary.MaxVarintLen64]byte
	for i := range buf {
		c, err := br.byte()
		if err != nil {
			return 0, err
		}
		buf[i] = c
		if c < 0x80 {
			v, n := binary.Uvarint(buf[:i+1])
			if n <= 0 {
				return 0, br.fail("a length that does not read")
			}
			return v, nil
		}
	}
	return 0, br.fail("a length that does not read")
}

// field reads a length and that many bytes, at most max.
func (br *backupReader) field(max uint64) ([]byte, error) {
	n, err := br.uvarint()
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, br.fail("a field of %d bytes, over %d", n, max)
	}
	var p []byte
	if n <= trustedField { // small: read into its size at once
		p = make([]byte, n)
		_, err = io.ReadFull(br.r, p)
	} else { // read what comes rather than allocate what a damaged length says
		p, err = io.ReadAll(io.LimitReader(br.r, int64(n)))
	}
	if err != nil || uint64(len(p)) != n {
		return nil, br.fail("cut short in a field of %d bytes", n)
	}
	br.h.Write(p)
	br.off += int64(n)
	return p, nil
}

// trustedField is the largest length a field is allocated at before its
// bytes are read: a damaged length costs at most this much.
const trustedField = 64 << 10

// maxField bounds one field of a backup: a value is at most a job.
const maxField = 1 << 31

// readBackup reads a whole backup, calling fn for each record (fn nil:
// only checked), and returns what it held. The records fn got before an
// error are not to be trusted: check first.
func readBackup(r io.Reader, fn func(bucket, key, val []byte) error) (BackupStats, error) {
	br := &backupReader{r: bufio.NewReaderSize(r, 1<<20), h: sha256.New()}
	magic := make([]byte, len(BackupMagic))
	if _, err := io.ReadFull(br.r, magic); err != nil || string(magic) != BackupMagic {
		return BackupStats{}, fmt.Errorf("%w: it does not start with %q", ErrBadBackup, BackupMagic[:len(BackupMagic)-1])
	}
	br.h.Write(magic)
	br.off = int64(len(magic))
	head, err := br.field(1 << 20)
	if err != nil {
		return BackupStats{}, err
	}
	var st BackupStats
	if err := json.Unmarshal(head, &st.Header); err != nil {
		return st, br.fail("its header does not read: %v", err)
	}
	if st.Header.Format != BackupFormat && st.Header.Format != BackupEncrypted {
		return st, fmt.Errorf("%w: format %d; this binary reads formats %d and %d", ErrBadBackup, st.Header.Format, BackupFormat, BackupEncrypted)
	}
	for {
		at := br.off
		tag, err := br.byte()
		if err != nil {
			return st, err
		}
		switch tag {
		case 'r':
			var parts [3][]byte
			for i := range parts {
				if parts[i], err = br.field(maxField); err != nil {
					return st, err
				}
			}
			if !knownBucket(parts[0]) {
				return st, fmt.Errorf("%w: at byte %d: a record of unknown bucket %q", ErrBadBackup, at, parts[0])
			}
			st.Records++
			if bytes.Equal(parts[0], BucketJobs) {
				st.Jobs++
			}
			if fn != nil {
				if err := fn(parts[0], parts[1], parts[2]); err != nil {
					return st, err
				}
			}
		case 'e':
			n, err := br.uvarint()
			if err != nil {
				return st, err
			}
			sum := br.h.Sum(nil) // of every byte before it
			got := make([]byte, sha256.Size)
			if _, err := io.ReadFull(br.r, got); err != nil {
				return st, br.fail("cut short in its checksum")
			}
			if n != uint64(st.Records) {
				return st, br.fail("it says %d records, it holds %d", n, st.Records)
			}
			if !bytes.Equal(got, sum) {
				return st, fmt.Errorf("%w: its checksum does not match its bytes (damaged)", ErrBadBackup)
			}
			if _, err := br.r.ReadByte(); err != io.EOF {
				return st, fmt.Errorf("%w: bytes after its end", ErrBadBackup)
			}
			st.Bytes = br.off + int64(len(got))
			st.Sum = fmt.Sprintf("%x", got)
			return st, nil
		default:
			return st, fmt.Errorf("%w: at byte %d: a record that is neither 'r' nor 'e' (damaged)", ErrBadBackup, at)
		}
	}
}

func knownBucket(b []byte) bool {
	for _, k := range Buckets {
		if bytes.Equal(k, b) {
			return true
		}
	}
	return false
}

// CheckBackup reads a whole backup and reports what it holds, or why it
// is not whole (ErrBadBackup).
func CheckBackup(r io.Reader) (BackupStats, error) { return readBackup(r, nil) }

// Restore implements Backuper: it reads r through once to check it
// (CheckBackup), changing nothing if it is not whole; then, into a
// journal that holds anything, it refuses with ErrNotEmpty unless
// replace, which deletes what the journal holds (Clear); then it rewinds
// r and writes every record into the journal, in writes of bulkChunk
// records (etcd: what one transaction may hold). If r changes in
// between, or a write fails, what was written stays: the error says the
// journal holds part of the backup (ErrPartialRestore). The journal's
// own sequence becomes the backup's, once it is opened again.
func (jn *Core) Restore(r io.ReadSeeker, replace bool) (BackupStats, error) {
	kc := &keyCheck{keys: jn.keys.Load()}
	checked, err := readBackup(r, kc.record)
	if err != nil {
		return checked, err
	}
	if err := kc.result(checked.Header); err != nil {
		return checked, err
	}
	empty, err := jn.Empty()
	switch {
	case err != nil:
		return checked, err
	case !empty && !replace:
		return checked, ErrNotEmpty
	case !empty:
		if err := jn.Clear(); err != nil {
			return checked, fmt.Errorf("emptying the journal before the restore: %w", err)
		}
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return checked, fmt.Errorf("rewinding the backup after its check: %w", err)
	}
	st, written, err := jn.restore(r)
	if err == nil && st.Sum != checked.Sum {
		err = fmt.Errorf("%w: it is not the backup that was checked", ErrBadBackup)
	}
	if err != nil {
		return st, fmt.Errorf("%w (%d of its %d records written): %w", ErrPartialRestore, written, checked.Records, err)
	}
	return st, nil
}

// ErrNotEmpty is a Restore refused, nothing changed, because the journal
// holds jobs or other data and the caller did not ask to replace them.
var ErrNotEmpty = errors.New("the journal holds jobs or other data")

// ErrPartialRestore is a restore that stopped after it had written part
// of the backup: the backup changed under it, or a write failed. Empty
// the journal and restore again (emq restore --force).
var ErrPartialRestore = errors.New("the journal now holds part of the backup")

// restore writes every record of r, stopping at the first fault; written
// is how many records its writes stored. The last write waits for r's
// checksum.
func (jn *Core) restore(r io.Reader) (st BackupStats, written int, err error) {
	chunk, most := jn.bulkChunk(), jn.opts.MaxWrite
	if most <= 0 {
		most = restoreBytes
	}
	type kv struct{ b, k, v []byte }
	var pending []kv
	size := 0 // pending's bytes, with room for each key's framing
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		batch := pending
		pending, size = nil, 0
		_, err := Wait(func(done func(struct{}, error)) {
			jn.Write(func(wt Tx) error {
				t := rawTx(wt) // as stored: encrypted values stay so
				for _, p := range batch {
					if bytes.Equal(p.b, BucketMeta) && bytes.Equal(p.k, KeysKey) {
						if err := mergeKeys(t, p.v); err != nil {
							return err
						}
						continue
					}
					if err := t.Put(p.b, p.k, p.v); err != nil {
						return err
					}
				}
				return nil
			}, func(err error) { done(struct{}{}, err) })
		})
		if err == nil {
			written += len(batch)
		}
		return err
	}
	st, err = readBackup(r, func(b, k, v []byte) error {
		n := len(b) + len(k) + len(v) + restoreFraming
		if size+n > most { // a write holds at most MaxWrite bytes (etcd: one request)
			if err := flush(); err != nil {
				return err
			}
		}
		pending, size = append(pending, kv{b, k, v}), size+n
		if len(pending) >= chunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return st, written, err
}

// bulkChunk is how many keys one write of Restore or Clear holds at
// most (etcd: what one transaction may).
func (jn *Core) bulkChunk() int {
	if jn.opts.BulkLimit > 0 {
		return jn.opts.BulkLimit * 4
	}
	return 10_000
}

// A write of Restore holds at most MaxWrite bytes, or restoreBytes when
// the backend sets none, counting restoreFraming for each key beside its
// bucket, key and value (etcd: the prefix, the operation's framing).
const (
	restoreBytes   = 64 << 20
	restoreFraming = 64
)

// Empty implements Backuper.
func (jn *Core) Empty() (bool, error) {
	empty := true
	err := jn.view(func(t Tx) error {
		for _, b := range Buckets {
			if bytes.Equal(b, BucketMeta) {
				continue
			}
			err := t.Scan(b, nil, func([]byte, []byte) (bool, error) {
				empty = false
				return false, nil
			})
			if err != nil || !empty {
				return err
			}
		}
		return nil
	})
	return empty, err
}

// Clear deletes every key of the journal but its meta (an operator's
// restore --force over a journal that holds jobs), in writes of at most
// what one may hold.
func (jn *Core) Clear() error {
	limit := jn.bulkChunk()
	for _, b := range Buckets {
		if bytes.Equal(b, BucketMeta) {
			continue
		}
		for {
			var keys [][]byte
			err := jn.view(func(t Tx) error {
				return t.Scan(b, nil, func(k, _ []byte) (bool, error) {
					keys = append(keys, bytes.Clone(k))
					return len(keys) < limit, nil
				})
			})
			if err != nil || len(keys) == 0 {
				if err != nil {
					return err
				}
				break
			}
			if _, err := Wait(func(done func(struct{}, error)) {
				jn.Write(func(t Tx) error {
					for _, k := range keys {
						if err := t.Delete(b, k); err != nil {
							return err
						}
					}
					return nil
				}, func(err error) { done(struct{}{}, err) })
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyCheck refuses, before anything is written, a backup of an
// encrypted journal that the journal's keys do not open: every key it
// names must be given, with its bytes, and every encrypted value must
// decrypt. It looks at each record as the check reads it (record), and
// says once the backup is known whole (result).
type keyCheck struct {
	keys  *Keyring
	first error
}

func (c *keyCheck) record(b, key, v []byte) error {
	if c.first != nil || c.keys == nil {
		return nil
	}
	if bytes.Equal(b, BucketMeta) && bytes.Equal(key, KeysKey) {
		var rec keysRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			c.first = fmt.Errorf("%w: its meta/keys does not read: %v", ErrBadBackup, err)
		} else {
			c.first = c.keys.check(rec, "the backup")
		}
	} else if valueEncrypted(b, v) {
		if _, err := c.keys.decryptValue(b, key, v, true); err != nil {
			c.first = fmt.Errorf("%w: the backup's %s/%q does not decrypt with the keys of %s: %v", ErrKeys, b, key, c.keys.file, err)
		}
	}
	return nil
}

func (c *keyCheck) result(h BackupHeader) error {
	if len(h.Keys) > 0 && c.keys == nil {
		return fmt.Errorf("%w: the backup is encrypted at rest with keys %s, and the journal was given no keys (--journal-keys FILE)", ErrKeys, strings.Join(h.Keys, ", "))
	}
	return c.first
}

// mergeKeys adds to the journal's meta/keys the keys of a backup's.
func mergeKeys(t Tx, v []byte) error {
	var theirs keysRecord
	if err := json.Unmarshal(v, &theirs); err != nil {
		return fmt.Errorf("%w: its meta/keys does not read: %v", ErrBadBackup, err)
	}
	ours, err := readKeysRecord(t)
	if err != nil {
		return err
	}
	for _, k := range theirs.Keys {
		if !slices.Contains(ours.names(), k.Name) {
			ours.Keys = append(ours.Keys, k)
		}
	}
	out, err := json.Marshal(ours)
	if err != nil {
		return err
	}
	return t.Put(BucketMeta, KeysKey, out)
}
