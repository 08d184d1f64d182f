// Package wal is an append-only log of records in segment files: a
// batch of records is one write and, when it must be durable, one
// fdatasync; every record carries its sequence number and a CRC-32C, and
// every byte is checked when the log is opened. boltstore puts it in
// front of bbolt: a commit is an append here, and bbolt is brought up to
// date behind it.
//
// # Format
//
// A segment is a file SEQ.wal, SEQ being its first record's sequence
// number in 20 digits. It has its full size before it is used, so that an
// unwritten record reads as zeros: the next one is zero-filled in the
// background once the last is half full (a flush then changes no file
// metadata: measured, an fdatasync into zero-filled blocks is much
// quicker than into allocated-but-unwritten ones), a megabyte a flush so
// that no long flush holds the disk; one needed before that is
// allocated at once (fallocate). It starts with a header of 24 bytes,
// flushed before the file takes the segment's name:
//
//	magic "EMQWAL\n\x00" | version u32 | first seq u64 | crc32c u32 (of the 20 before)
//
// then records, each starting at a multiple of 8:
//
//	len u32 | crc32c u32 | seq u64 | payload (len bytes) | zeros to a multiple of 8 | trailer
//
// The trailer is 8 constant bytes, none of them zero: it tells a record
// whose end reached the disk from one whose end did not (see Opening).
//
// The CRC-32C (Castagnoli) covers len, seq and payload. Sequence numbers
// rise by one from record to record, across segments. A header of 16
// zero bytes ends a segment's records. Integers are little-endian.
//
// # Opening
//
// Open checks every record after the given sequence. A record that is
// short or fails its checksum at the end of the last segment, with no
// valid record after it, is a torn tail when its write did not wholly
// reach the disk: no trailer lies where it ends (nor anywhere after it),
// or a 4 KiB block of it is still zeros. That is a write that was cut
// (the process or the machine died during it), never flushed, hence
// never acknowledged: it is zeroed, the zeros flushed, and reported. A
// bad record anywhere else, or one whose write did reach the disk, is
// damage (ErrDamaged, naming the file and the offset): Open fails,
// unless Options.Recover, which skips every bad stretch and reports it.
// Damage holding only records at or below the sequence asked for loses
// nothing: it is skipped and reported (Report.Passed). Bytes changed in
// the very trailer of the last record cannot be told from a torn write.
package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Format facts.
const (
	Version   = 1
	headerLen = 24                  // a segment's header
	recHeader = 16                  // a record's: len, crc, seq
	trailer   = "\xe5MQ\x01END\xa7" // a record's last 8 bytes
	block     = 4096                // what a disk writes whole, or not at all
	magic     = "EMQWAL\n\x00"
	suffix    = ".wal"
	spareName = "next.wal.tmp" // the next segment, being zero-filled
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors of Open, matched with errors.Is.
var (
	// ErrDamaged: a record before the end, or a segment's header, fails
	// its checks. The error is a *DamageError naming where.
	ErrDamaged = errors.New("write-ahead log is damaged")
	// ErrTooNew: a segment is of a newer format than this binary reads.
	ErrTooNew = errors.New("write-ahead log segment is of a newer format than this binary knows")
)

// DamageError says where the log is damaged.
type DamageError struct {
	File   string
	Offset int64
	Reason string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("%v: %s at offset %d: %s", ErrDamaged, e.File, e.Offset, e.Reason)
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// Options configure a log.
type Options struct {
	// SegmentSize is how many bytes a segment holds (64 MiB); a batch
	// that does not fit in what is left starts the next one. A record is
	// at most SegmentSize less its header.
	SegmentSize int64
	// ReadOnly opens the log for reading: a torn tail is left as it is,
	// and Append fails.
	ReadOnly bool
	// Recover skips damaged stretches instead of failing, and reports
	// each (Report.Lost).
	Recover bool
	// Checkpointed is where the records at or below Open's after end
	// (End, as it was when the last of them was written), if known: a bad
	// record before it holds nothing needed, and is passed over.
	Checkpointed Position
}

// Position is a place in the log: the end of a record, in the segment
// whose first record is Segment. The zero Position is nowhere.
type Position struct {
	Segment uint64
	Offset  int64
}

// DefaultSegmentSize is Options.SegmentSize's default.
const DefaultSegmentSize = 64 << 20

// Report is what Open found.
type Report struct {
	Records int   // records replayed (after the sequence asked for)
	Torn    *Cut  // the torn tail cut off, if any
	Lost    []Cut // with Recover: the damaged stretches skipped
	// Passed: damaged stretches that held only records at or below the
	// sequence asked for, which nobody needs: skipped, nothing lost, but
	// the bytes went bad (a disk to watch).
	Passed []Cut
}

// Cut is a stretch of a segment that Open did not replay.
type Cut struct {
	File   string
	Offset int64
	Bytes  int64
	Reason string
}

func (c Cut) String() string {
	return fmt.Sprintf("%s at offset %d, %d bytes: %s", c.File, c.Offset, c.Bytes, c.Reason)
}

// Log is an open log. Append, Sync and Close are for one goroutine at a
// time (a journal's committer); TruncateFront may run beside them.
type Log struct {
	dir  string
	opts Options

	mu   sync.Mutex // the segment list, against TruncateFront
	segs []segment  // by first seq; the last is the one appended to

	f      *os.File // the last segment
	first  uint64   // its first record's seq
	off    int64    // where the next record goes in it
	next   uint64   // the next record's seq
	lastAt Position // where the last record appended starts (its data)
	dirty  bool     // written since the last flush
	failed error    // a write or flush failed: nothing more is taken
	buf    []byte

	spare chan error // the next segment's zero-filling; nil: none under way
}

type segment struct {
	first uint64
	path  string
	f     *os.File // open for reading (ReadAt); the last one's is also l.f
}

func segName(first uint64) string { return fmt.Sprintf("%020d%s", first, suffix) }

func pad8(n int64) int64 { return (n + 7) &^ 7 }

// recLen is the bytes a record of n payload bytes takes.
func recLen(n int64) int64 { return pad8(recHeader+n) + int64(len(trailer)) }

// Open opens the log in dir (made if missing) and calls fn, in order,
// with every record whose sequence is above after; records at or below
// it were checkpointed and are not read. A new log's first record is
// after+1. The record passed to fn is valid until fn returns.
func Open(dir string, opts Options, after uint64, fn func(seq uint64, rec []byte) error) (*Log, Report, error) {
	return OpenRecords(dir, opts, after, func(r Record) error { return fn(r.Seq, r.Data) })
}

// A Record is one record of the log as Open reads it.
type Record struct {
	Seq  uint64
	Data []byte   // valid until the callback returns
	At   Position // where Data starts: ReadAt reads it back from there
}

// OpenRecords is Open, giving each record with where it lies.
func OpenRecords(dir string, opts Options, after uint64, fn func(Record) error) (*Log, Report, error) {
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.SegmentSize < 4096 || opts.SegmentSize%8 != 0 {
		return nil, Report{}, fmt.Errorf("wal: segment size %d: want a multiple of 8, at least 4096", opts.SegmentSize)
	}
	l := &Log{dir: dir, opts: opts, next: after + 1}
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, Report{}, fmt.Errorf("wal %s: %w", dir, err)
		}
		_ = os.Remove(filepath.Join(dir, spareName)) // one a crash left half made
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !(opts.ReadOnly && errors.Is(err, os.ErrNotExist)) {
		return nil, Report{}, fmt.Errorf("wal %s: %w", dir, err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok {
			continue
		}
		first, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		l.segs = append(l.segs, segment{first: first, path: filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(l.segs, func(a, b segment) int { return compare(a.first, b.first) })
	var rep Report
	if err := l.replay(after, fn, &rep); err != nil {
		l.closeAll()
		return nil, rep, err
	}
	if opts.ReadOnly {
		l.f = nil // kept open for ReadAt only
		return l, rep, nil
	}
	switch {
	case len(l.segs) == 0:
		if err := l.startSegment(l.next); err != nil {
			return nil, rep, err
		}
	case l.next <= after:
		// The log ends before the checkpoint (its last records were
		// checkpointed, then lost): what comes next starts a segment of
		// its own, at after+1, so that no gap lies inside a segment.
		l.next = after + 1
		if err := l.rotate(); err != nil {
			l.Close()
			return nil, rep, err
		}
	}
	return l, rep, nil
}

func compare(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// replay reads the segments that hold records above after.
func (l *Log) replay(after uint64, fn func(Record) error, rep *Report) error {
	// Segments wholly at or below after are not read: the next one starts
	// at or below after+1.
	start := 0
	for start+1 < len(l.segs) && l.segs[start+1].first <= after+1 {
		start++
	}
	if start < len(l.segs) && l.segs[start].first > after+1 {
		s := l.segs[start]
		if !l.opts.Recover {
			return &DamageError{filepath.Base(s.path), 0, fmt.Sprintf("records %d to %d are missing (the log starts at %d)", after+1, s.first-1, s.first)}
		}
		rep.Lost = append(rep.Lost, Cut{filepath.Base(s.path), 0, 0, fmt.Sprintf("records %d to %d missing", after+1, s.first-1)})
	}
	if start < len(l.segs) {
		l.next = l.segs[start].first // its records at or below after are read, not replayed
	}
	for i := start; i < len(l.segs); i++ {
		last := i == len(l.segs)-1
		var nextFirst uint64 // where the next segment starts; 0: none
		if !last {
			nextFirst = l.segs[i+1].first
		}
		f, err := l.replaySegment(l.segs[i], nextFirst, after, fn, rep)
		if err != nil {
			return err
		}
		l.segs[i].f = f
	}
	return nil
}

// replaySegment reads one segment and returns it open, for ReadAt; the
// last one is left positioned at its end, for appends. A segment lost
// to damage (with Recover) is returned nil.
func (l *Log) replaySegment(s segment, nextFirst, after uint64, fn func(Record) error, rep *Report) (_ *os.File, err error) {
	name, last := filepath.Base(s.path), nextFirst == 0
	flag := os.O_RDWR
	if l.opts.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(s.path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", s.path, err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", s.path, err)
	}
	size := fi.Size()
	var hdr [headerLen]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, l.damaged(rep, Cut{name, 0, size, "its header cannot be read: " + err.Error()})
	}
	switch {
	case string(hdr[:8]) != magic:
		return nil, l.damaged(rep, Cut{name, 0, size, "its header is not a write-ahead log segment's"})
	case crc32Header(hdr[:20]) != binary.LittleEndian.Uint32(hdr[20:]):
		return nil, l.damaged(rep, Cut{name, 0, size, "its header fails its checksum"})
	case binary.LittleEndian.Uint32(hdr[8:]) > Version:
		return nil, fmt.Errorf("%w: %s is of version %d, this binary knows up to %d", ErrTooNew, s.path, binary.LittleEndian.Uint32(hdr[8:]), Version)
	case binary.LittleEndian.Uint64(hdr[12:]) != s.first:
		return nil, l.damaged(rep, Cut{name, 0, size, fmt.Sprintf("its header says it starts at record %d, its name %d", binary.LittleEndian.Uint64(hdr[12:]), s.first)})
	}
	if s.first > l.next && s.first > after+1 && l.next > 0 {
		if !l.opts.Recover {
			return nil, &DamageError{name, 0, fmt.Sprintf("records %d to %d are missing before it", max(l.next, after+1), s.first-1)}
		}
		rep.Lost = append(rep.Lost, Cut{name, 0, 0, fmt.Sprintf("records %d to %d missing before it", max(l.next, after+1), s.first-1)})
	}
	l.next = max(l.next, s.first)
	r := bufio.NewReaderSize(io.NewSectionReader(f, headerLen, size-headerLen), 1<<20)
	off := int64(headerLen)
	var rh [recHeader]byte
	var payload []byte
	for {
		if off+recHeader > size {
			break // the segment is full
		}
		if _, err := io.ReadFull(r, rh[:]); err != nil {
			break
		}
		n := int64(binary.LittleEndian.Uint32(rh[0:]))
		sum := binary.LittleEndian.Uint32(rh[4:])
		seq := binary.LittleEndian.Uint64(rh[8:])
		if n == 0 && sum == 0 && seq == 0 {
			break // zeros: the end of its records
		}
		bad := ""
		switch {
		case recLen(n) > size-off:
			bad = fmt.Sprintf("a record of %d bytes runs past the end of the segment", n)
		case seq != l.next:
			bad = fmt.Sprintf("record %d where %d should be", seq, l.next)
		}
		if bad == "" {
			payload = slices.Grow(payload[:0], int(n))[:n]
			if _, err := io.ReadFull(r, payload); err != nil {
				bad = "a record cut short: " + err.Error()
			} else if recordSum(rh[:], payload) != sum {
				bad = "a record fails its checksum"
			}
		}
		if p := l.opts.Checkpointed; bad != "" && p.Segment == s.first && off < p.Offset && p.Offset <= size && l.next <= after {
			// Records up to after end at p: whatever is wrong before it
			// was checkpointed.
			rep.Passed = append(rep.Passed, Cut{name, off, p.Offset - off, bad + fmt.Sprintf(" (records %d to %d, all checkpointed: nothing lost)", l.next, after)})
			off, l.next = p.Offset, after+1
			r.Reset(io.NewSectionReader(f, off, size-off))
			continue
		}
		if bad != "" {
			end, err := l.badRecord(f, s, nextFirst, after, off, size, bad, rep)
			if err != nil {
				return nil, err
			}
			if end < 0 { // a torn tail, cut: the records end here
				break
			}
			// Recover: go on after the damaged stretch.
			off = end
			r.Reset(io.NewSectionReader(f, off, size-off))
			continue
		}
		padded := recLen(n)
		if _, err := r.Discard(int(padded - recHeader - n)); err != nil { // padding and trailer: the checksum vouches for the record
			break
		}
		if seq > after {
			if err := fn(Record{seq, payload, Position{s.first, off + recHeader}}); err != nil {
				return nil, err
			}
			rep.Records++
		}
		l.next = seq + 1
		off += padded
	}
	if last {
		l.mu.Lock()
		l.f, l.off, l.first = f, off, s.first
		l.mu.Unlock()
	}
	keep = true
	return f, nil
}

// badRecord decides about a bad record at off: a torn tail (end -1, the
// tail zeroed); a stretch of records all at or below after (passed: the
// offset to go on from); or damage (an error; with Recover, the offset
// of the next valid record, or the segment's end, and the stretch
// reported). It reads the rest of the segment (at most SegmentSize) to
// decide.
func (l *Log) badRecord(f *os.File, s segment, nextFirst, after uint64, off, size int64, why string, rep *Report) (end int64, err error) {
	name := filepath.Base(s.path)
	rest := make([]byte, size-off)
	n, _ := f.ReadAt(rest, off)
	rest = rest[:n]
	next, found := findValid(rest, 8)
	if nextFirst == 0 && !found && !written(rest, off) {
		garbage := int64(len(rest))
		for garbage > 0 && rest[garbage-1] == 0 {
			garbage--
		}
		cut := Cut{name, off, pad8(garbage), "torn tail: " + why}
		if !l.opts.ReadOnly {
			if err := zero(f, off, cut.Bytes); err != nil {
				return 0, fmt.Errorf("wal %s: cutting the torn tail at offset %d: %w", s.path, off, err)
			}
		}
		rep.Torn = &cut
		return -1, nil
	}
	// The stretch holds records l.next up to the one before resume.
	resume, end := nextFirst, size
	if found {
		resume, end = binary.LittleEndian.Uint64(rest[next+8:]), off+next
	}
	stretch := Cut{name, off, end - off, why}
	if resume > 0 && resume <= after+1 { // 0: the log's end, nothing known after
		stretch.Reason += fmt.Sprintf(" (records %d to %d, all checkpointed: nothing lost)", l.next, resume-1)
		rep.Passed = append(rep.Passed, stretch)
		l.next = resume
		return end, nil
	}
	if !l.opts.Recover {
		return 0, &DamageError{name, off, why + "; valid records follow (damage, not a torn write): emq journal check names what is lost, and --journal-recover or emq journal salvage keeps the rest"}
	}
	rep.Lost = append(rep.Lost, stretch)
	l.next = resume // the records after the stretch go on from the one found
	return end, nil
}

// written reports whether the write of the bad record at the start of
// rest (at offset off of its segment) reached the disk whole: a trailer
// lies where its header says it ends or, the header being unreadable,
// somewhere after it; and no 4 KiB block up to that trailer is all zeros.
// A torn write leaves its end or one of its blocks as the segment was
// before, zeros; damage leaves them in place.
func written(rest []byte, off int64) bool {
	end := int64(-1)
	if len(rest) >= recHeader {
		if e := recLen(int64(binary.LittleEndian.Uint32(rest))); e <= int64(len(rest)) && string(rest[e-8:e]) == trailer {
			end = e
		}
	}
	for o := int64(len(rest))&^7 - 8; end < 0 && o >= recHeader; o -= 8 {
		if string(rest[o:o+8]) == trailer {
			end = o + 8
		}
	}
	if end < 0 {
		return false
	}
	for b := (off+block-1)/block*block - off; b+block <= end; b += block {
		if !slices.ContainsFunc(rest[b:b+block], func(c byte) bool { return c != 0 }) {
			return false
		}
	}
	return true
}

// findValid is the offset in b, at a multiple of 8 from from on, of a
// record that passes its checks.
func findValid(b []byte, from int64) (int64, bool) {
	for off := from; off+recHeader <= int64(len(b)); off += 8 {
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		seq := binary.LittleEndian.Uint64(b[off+8:])
		if n == 0 && seq == 0 || recLen(n) > int64(len(b))-off {
			continue
		}
		if recordSum(b[off:off+recHeader], b[off+recHeader:off+recHeader+n]) == binary.LittleEndian.Uint32(b[off+4:]) {
			return off, true
		}
	}
	return 0, false
}

// zero writes n zeros at off and flushes them.
func zero(f *os.File, off, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.WriteAt(buf[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return f.Sync()
}

// damaged is a bad segment header: damage, or with Recover a lost
// segment.
func (l *Log) damaged(rep *Report, c Cut) error {
	if !l.opts.Recover {
		return &DamageError{c.File, c.Offset, c.Reason}
	}
	rep.Lost = append(rep.Lost, c)
	return nil
}

// recordSum is the CRC-32C of a record's len, seq and payload.
func recordSum(hdr, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, hdr[0:4])
	c = crc32.Update(c, castagnoli, hdr[8:16])
	return crc32.Update(c, castagnoli, payload)
}

// End is where the last record written ends.
func (l *Log) End() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return Position{}
	}
	return Position{l.segs[len(l.segs)-1].first, l.off}
}

// Next is the sequence number the next record gets.
func (l *Log) Next() uint64 { return l.next }

// MaxRecord is the largest record a segment takes.
func (l *Log) MaxRecord() int64 { return l.opts.SegmentSize - headerLen - recLen(0) }

// Append writes recs as the next records, in one write (all in one
// segment: the batch starts the next one if it does not fit), and with sync
// flushes them (one fdatasync) before it returns; it returns the last
// one's sequence. Without sync they are flushed by the next Append that
// syncs, or Sync, or Close (what a crash loses of them was never
// acknowledged). A failed write or flush is not retried: the log takes
// nothing more (Failed), since what the disk holds is unknown.
func (l *Log) Append(recs [][]byte, sync bool) (uint64, error) {
	if l.opts.ReadOnly {
		return 0, errors.New("wal: open read-only")
	}
	if l.failed != nil {
		return 0, l.failed
	}
	size := int64(0)
	for _, rec := range recs {
		if int64(len(rec)) > l.MaxRecord() {
			return 0, fmt.Errorf("wal: a record of %d bytes is over the %d a segment takes", len(rec), l.MaxRecord())
		}
		size += recLen(int64(len(rec)))
	}
	if size > l.opts.SegmentSize-headerLen {
		return 0, fmt.Errorf("wal: a batch of %d bytes is over the %d a segment takes", size, l.opts.SegmentSize-headerLen)
	}
	if size > l.opts.SegmentSize-l.off {
		// The batch goes whole to the next segment; this one's records
		// are flushed first, so that no segment but the last can end torn.
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	if err := l.write(recs, size); err != nil {
		return 0, err
	}
	if sync {
		if err := l.Sync(); err != nil {
			return 0, err
		}
	}
	return l.next - 1, nil
}

// write puts recs (size bytes, padded) at the end of the last segment.
func (l *Log) write(recs [][]byte, size int64) error {
	l.buf = slices.Grow(l.buf[:0], int(size))[:size]
	clear(l.buf)
	pos := int64(0)
	for _, rec := range recs {
		l.lastAt = Position{l.first, l.off + pos + recHeader}
		h := l.buf[pos : pos+recHeader]
		binary.LittleEndian.PutUint32(h[0:], uint32(len(rec)))
		binary.LittleEndian.PutUint64(h[8:], l.next)
		copy(l.buf[pos+recHeader:], rec)
		binary.LittleEndian.PutUint32(h[4:], recordSum(h, rec))
		pos += recLen(int64(len(rec)))
		copy(l.buf[pos-8:pos], trailer)
		l.next++
	}
	if l.spare == nil && l.off+size > l.opts.SegmentSize/2 {
		l.prepareSpare() // the next segment, ready before it is needed
	}
	if _, err := l.f.WriteAt(l.buf, l.off); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			// Nothing is counted written: the next write goes to the same
			// place, over what part of this one landed.
			l.next -= uint64(len(recs))
			return fmt.Errorf("wal %s: write: %w", l.f.Name(), err)
		}
		return l.fail("write", err)
	}
	l.off += size
	l.dirty = true
	return nil
}

// Sync flushes what was written (one fdatasync), if anything was.
func (l *Log) Sync() error {
	if l.failed != nil {
		return l.failed
	}
	if !l.dirty {
		return nil
	}
	if err := fdatasync(l.f); err != nil {
		return l.fail("fdatasync", err)
	}
	l.dirty = false
	return nil
}

func (l *Log) fail(what string, err error) error {
	l.failed = fmt.Errorf("wal %s: %s failed: %w (the log takes nothing more: what the disk holds is unknown; restart to replay what it has)", l.f.Name(), what, err)
	return l.failed
}

// Failed is the error that stopped the log, nil while it works.
func (l *Log) Failed() error { return l.failed }

// rotate flushes the last segment and starts the next, from the spare
// the background has zero-filled (or, while that is not done, waiting
// for it).
func (l *Log) rotate() error {
	if err := l.Sync(); err != nil {
		return err
	}
	// A segment that cannot be made (the disk full) is not a failure of
	// the log: nothing was written to it, and the next rotation tries
	// again.
	var err error
	if l.spare != nil {
		err = <-l.spare
		l.spare = nil
	} else { // none under way: one allocated now, not zero-filled
		err = allocFile(filepath.Join(l.dir, spareName), l.opts.SegmentSize)
	}
	if err != nil {
		_ = os.Remove(filepath.Join(l.dir, spareName))
		return fmt.Errorf("wal %s: preparing the next segment: %w", l.dir, err)
	}
	return l.openSegment(l.next)
}

// startSegment makes the first segment of a new log, at first: allocated
// at once, not zero-filled (opening stays quick).
func (l *Log) startSegment(first uint64) error {
	if err := allocFile(filepath.Join(l.dir, spareName), l.opts.SegmentSize); err != nil {
		return fmt.Errorf("wal %s: %w", l.dir, err)
	}
	return l.openSegment(first)
}

// openSegment makes the spare, zero-filled, the last segment, holding
// the records from first on. Its header is written and flushed before
// the spare takes the segment's name, then the name is made durable in
// the folder: a segment's name never reaches the disk without its
// header (a power cut between the two would leave a segment that fails
// its checks, and a log that does not open).
func (l *Log) openSegment(first uint64) error {
	spare, path := filepath.Join(l.dir, spareName), filepath.Join(l.dir, segName(first))
	named := false
	err := writeHeader(spare, first)
	if err == nil {
		err = os.Rename(spare, path)
		named = err == nil
	}
	if err == nil {
		err = syncDir(l.dir)
	}
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		// Nothing was written to this segment but its header: it goes,
		// and the next rotation tries again.
		if named {
			_ = os.Remove(path)
		} else {
			_ = os.Remove(spare)
		}
		return fmt.Errorf("wal %s: starting a segment: %w", path, err)
	}
	l.mu.Lock()
	l.segs = append(l.segs, segment{first, path, f})
	l.f, l.off, l.first = f, headerLen, first
	l.mu.Unlock()
	return nil
}

// writeHeader writes and flushes the header of a segment of records
// from first on into the file at path.
func writeHeader(path string, first uint64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	var hdr [headerLen]byte
	copy(hdr[:], magic)
	binary.LittleEndian.PutUint32(hdr[8:], Version)
	binary.LittleEndian.PutUint64(hdr[12:], first)
	binary.LittleEndian.PutUint32(hdr[20:], crc32Header(hdr[:20]))
	if _, err := f.WriteAt(hdr[:], 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// prepareSpare zero-fills the next segment in the background.
func (l *Log) prepareSpare() {
	ch := make(chan error, 1)
	l.spare = ch
	path, size := filepath.Join(l.dir, spareName), l.opts.SegmentSize
	go func() { ch <- zeroFile(path, size) }()
}

// zeroFile makes path a file of size zeros, flushed a megabyte at a
// time: the log's own flushes never wait long behind one of its.
func zeroFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			f.Close()
			return err
		}
		if err := fdatasync(f); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// allocFile makes path a file of size bytes that read as zeros, its
// blocks allocated (preallocate) and flushed.
func allocFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TruncateFront deletes the segments whose records are all at or below
// upto (checkpointed elsewhere); the last segment stays.
func (l *Log) TruncateFront(upto uint64) error {
	l.mu.Lock()
	var gone []segment
	for len(l.segs) > 1 && l.segs[1].first <= upto+1 {
		gone = append(gone, l.segs[0])
		l.segs = l.segs[1:]
	}
	l.mu.Unlock()
	for _, s := range gone {
		if s.f != nil {
			s.f.Close()
		}
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: deleting %s: %w", s.path, err)
		}
	}
	if len(gone) > 0 {
		return syncDir(l.dir)
	}
	return nil
}

// Segments is how many segment files the log has.
func (l *Log) Segments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs)
}

// Close flushes what was written and closes the log.
func (l *Log) Close() error {
	var err error
	if l.f != nil && l.failed == nil {
		err = l.Sync()
	}
	if l.spare != nil {
		<-l.spare // the spare stays, zero-filled, for the next open... which removes it
		l.spare = nil
	}
	if cerr := l.closeAll(); err == nil {
		err = cerr
	}
	return err
}

// closeAll closes every segment's file.
func (l *Log) closeAll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for i, s := range l.segs {
		if s.f == nil {
			continue
		}
		if cerr := s.f.Close(); err == nil && s.f == l.f {
			err = cerr // the one written to: its close may report a failed write
		}
		l.segs[i].f = nil
	}
	l.f = nil
	return err
}

// LastAppended is where the last record Append wrote starts: its data
// can be read back from there (ReadAt) until the segment is truncated.
func (l *Log) LastAppended() Position { return l.lastAt }

// ReadAt reads len(p) bytes of a record's data from at (a Record's At,
// LastAppended, or further into the same record). It is safe beside
// Append and TruncateFront; a segment already truncated is an error.
func (l *Log) ReadAt(p []byte, at Position) error {
	l.mu.Lock()
	i, found := slices.BinarySearchFunc(l.segs, at.Segment, func(s segment, first uint64) int { return compare(s.first, first) })
	var f *os.File
	if found {
		f = l.segs[i].f
	}
	l.mu.Unlock()
	if f == nil {
		return fmt.Errorf("wal %s: no segment %s open to read (truncated)", l.dir, segName(at.Segment))
	}
	if _, err := f.ReadAt(p, at.Offset); err != nil {
		return fmt.Errorf("wal %s: reading at offset %d: %w", f.Name(), at.Offset, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// crc32Header is the checksum a segment's header carries of its first 20
// bytes.
func crc32Header(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// writeZeros writes size zeros into f.
func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return err
		}
	}
	return nil
}
