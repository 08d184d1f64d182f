package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/cutfs"
	"github.com/eventmq/emq/internal/testutil"
)

const testSegment = 64 << 10

func rec(i int) []byte {
	return []byte(fmt.Sprintf("record %d %s", i, bytes.Repeat([]byte{byte(i)}, i%300)))
}

// open opens the log in dir and returns what it replayed after after.
func open(t *testing.T, dir string, opts Options, after uint64) (*Log, Report, map[uint64][]byte) {
	t.Helper()
	if opts.SegmentSize == 0 {
		opts.SegmentSize = testSegment
	}
	got := map[uint64][]byte{}
	l, rep, err := Open(dir, opts, after, func(seq uint64, r []byte) error {
		got[seq] = bytes.Clone(r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() }) // its spare's zero-filling ends before the folder goes
	return l, rep, got
}

// fill appends n records in batches of batch, synced, from record from.
func fill(t *testing.T, l *Log, from, n, batch int) {
	t.Helper()
	for i := from; i < from+n; i += batch {
		var recs [][]byte
		for k := i; k < min(i+batch, from+n); k++ {
			recs = append(recs, rec(k))
		}
		if _, err := l.Append(recs, true); err != nil {
			t.Fatal(err)
		}
	}
}

// Records come back in order after a close, across segments, and the
// log goes on where it ended.
func TestAppendReplayAndRotate(t *testing.T) {
	dir := t.TempDir()
	l, rep, got := open(t, dir, Options{}, 0)
	if rep.Records != 0 || len(got) != 0 || l.Next() != 1 {
		t.Fatalf("a new log: %+v, next %d", rep, l.Next())
	}
	fill(t, l, 1, 1000, 7)
	if l.Segments() < 3 {
		t.Fatalf("%d segments for 1000 records in %d-byte segments: want rotation", l.Segments(), testSegment)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rep, got = open(t, dir, Options{}, 0)
	if rep.Records != 1000 || rep.Torn != nil || l.Next() != 1001 {
		t.Fatalf("replayed %+v, next %d", rep, l.Next())
	}
	for i := 1; i <= 1000; i++ {
		if !bytes.Equal(got[uint64(i)], rec(i)) {
			t.Fatalf("record %d: %q", i, got[uint64(i)])
		}
	}
	fill(t, l, 1001, 10, 3)
	l.Close()
	_, rep, _ = open(t, dir, Options{}, 995)
	if rep.Records != 15 {
		t.Fatalf("after 995: %d records, want 15", rep.Records)
	}
}

// TruncateFront deletes the segments wholly at or below a sequence, and
// the log opens after it.
func TestTruncateFront(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	fill(t, l, 1, 1000, 10)
	before := l.Segments()
	if err := l.TruncateFront(600); err != nil {
		t.Fatal(err)
	}
	if l.Segments() >= before || l.Segments() < 2 {
		t.Fatalf("%d segments left of %d", l.Segments(), before)
	}
	if err := l.TruncateFront(5000); err != nil || l.Segments() != 1 {
		t.Fatalf("past the end: %d segments, %v; want the last one kept", l.Segments(), err)
	}
	l.Close()
	l, rep, got := open(t, dir, Options{}, 1000)
	if rep.Records != 0 || len(got) != 0 || l.Next() != 1001 {
		t.Fatalf("after truncating: %+v next %d", rep, l.Next())
	}
	l.Close()
	if _, _, err := Open(dir, Options{SegmentSize: testSegment}, 10, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrDamaged) {
		t.Fatalf("records 11 and on missing: %v, want ErrDamaged", err)
	}
}

// A log whose last records were checkpointed and then lost (its end
// before the checkpoint) goes on at the checkpoint, in a segment of its
// own, and opens again.
func TestLogBehindTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	fill(t, l, 1, 10, 5)
	l.Close()
	l, _, _ = open(t, dir, Options{}, 50)
	if l.Next() != 51 {
		t.Fatalf("next %d, want 51", l.Next())
	}
	if _, err := l.Append([][]byte{rec(51)}, true); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, rep, got := open(t, dir, Options{}, 50)
	if rep.Records != 1 || !bytes.Equal(got[51], rec(51)) {
		t.Fatalf("after the gap: %+v", rep)
	}
}

// lastRecord returns the path of the last segment and the offset and
// payload length of its last record.
func lastRecord(t *testing.T, dir string, l *Log) (string, int64, int64) {
	t.Helper()
	path := l.segs[len(l.segs)-1].path
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off, last := int64(headerLen), int64(-1)
	for off+recHeader <= int64(len(b)) {
		n := int64(uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24)
		if n == 0 && bytes.Equal(b[off:off+recHeader], make([]byte, recHeader)) {
			break
		}
		last = off
		off += recLen(n)
	}
	n := int64(uint32(b[last]) | uint32(b[last+1])<<8 | uint32(b[last+2])<<16 | uint32(b[last+3])<<24)
	return path, last, n
}

// A torn last write of any length (cut at every byte of the last record,
// or its bytes garbled with nothing valid after) is cut at open, reported
// with its file and offset, zeroed, and the log goes on from the record
// before it; it opens cleanly again.
func TestTornTailOfEveryLength(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	l, _, _ := open(t, base, Options{}, 0)
	fill(t, l, 1, 40, 4)
	path, off, n := lastRecord(t, base, l)
	l.Close()
	orig, _ := os.ReadFile(path)
	length := recHeader + n // a cut in the padding or the trailer leaves a whole record
	for cut := int64(1); cut < length; cut++ {
		for _, how := range []string{"short", "garbled"} {
			dir := t.TempDir()
			torn := bytes.Clone(orig)
			if how == "short" { // the write stopped at byte cut: the rest never reached the disk
				clear(torn[off+cut:])
			} else { // its bytes from cut on, to its end, are not what was written
				for i := off + cut; i < off+recLen(n); i++ {
					torn[i] ^= 0x5a
				}
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), torn, 0o600); err != nil {
				t.Fatal(err)
			}
			copySegments(t, base, dir, filepath.Base(path))
			l, rep, got := open(t, dir, Options{}, 0)
			if rep.Torn == nil || rep.Torn.Offset != off || rep.Torn.File != filepath.Base(path) {
				t.Fatalf("%s at %d: reported %+v, want the torn tail at %d", how, cut, rep.Torn, off)
			}
			if len(got) != 39 || l.Next() != 40 {
				t.Fatalf("%s at %d: %d records, next %d; want 39, 40", how, cut, len(got), l.Next())
			}
			fill(t, l, 40, 2, 1) // the log goes on over the cut
			l.Close()
			if _, rep, got := open(t, dir, Options{}, 0); rep.Torn != nil || len(got) != 41 {
				t.Fatalf("%s at %d, reopened: torn %+v, %d records; want none, 41", how, cut, rep.Torn, len(got))
			}
		}
	}
}

// copySegments copies base's segments but skip into dir.
func copySegments(t *testing.T, base, dir, skip string) {
	t.Helper()
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.Name() == skip || filepath.Ext(e.Name()) != suffix {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(base, e.Name()))
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The last record changed on the disk after its write reached it whole
// (its trailer in place) is damage, not a torn write: its ACK was sent.
// A last write with a 4 KiB block still zeros (the disk wrote blocks out
// of order and stopped) is torn, trailer or not.
func TestLastRecordDamagedOrTorn(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("payload!"), 3*block/8)
	for _, how := range []string{"bytes changed", "a block unwritten"} {
		dir := t.TempDir()
		l, _, _ := open(t, dir, Options{}, 0)
		fill(t, l, 1, 5, 1)
		if _, err := l.Append([][]byte{big}, true); err != nil {
			t.Fatal(err)
		}
		path, off, n := lastRecord(t, dir, l)
		l.Close()
		b, _ := os.ReadFile(path)
		if how == "bytes changed" {
			copy(b[off+recHeader+n/2:], "garbage!")
		} else {
			first := (off + block - 1) / block * block
			clear(b[first : first+block])
		}
		os.WriteFile(path, b, 0o600)
		_, rep, err := Open(dir, Options{SegmentSize: testSegment}, 0, func(uint64, []byte) error { return nil })
		var de *DamageError
		switch how {
		case "bytes changed":
			if !errors.As(err, &de) || de.Offset != off {
				t.Fatalf("%s: %v (torn %+v), want damage at offset %d", how, err, rep.Torn, off)
			}
		default:
			if err != nil || rep.Torn == nil || rep.Torn.Offset != off {
				t.Fatalf("%s: %v, torn %+v; want the tail at %d cut", how, err, rep.Torn, off)
			}
		}
	}
}

// A bad record with valid records after it, or in a segment before the
// last, is damage: Open names the file and the offset. ReadOnly reports
// a torn tail but leaves it. Recover skips the damaged stretch, reports
// it, and keeps every good record after it.
func TestDamageInTheMiddle(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"last segment", "first segment"} {
		dir := t.TempDir()
		l, _, _ := open(t, dir, Options{}, 0)
		fill(t, l, 1, 600, 6)
		seg := l.segs[len(l.segs)-1].path
		if where == "first segment" {
			seg = l.segs[0].path
		}
		l.Close()
		b, _ := os.ReadFile(seg)
		b[headerLen+recHeader] ^= 0xff // the first record's payload
		os.WriteFile(seg, b, 0o600)

		_, _, err := Open(dir, Options{SegmentSize: testSegment}, 0, func(uint64, []byte) error { return nil })
		var de *DamageError
		if !errors.As(err, &de) || de.File != filepath.Base(seg) || de.Offset != headerLen {
			t.Fatalf("%s: %v, want damage in %s at offset %d", where, err, filepath.Base(seg), headerLen)
		}
		l, rep, got := open(t, dir, Options{Recover: true}, 0)
		if len(rep.Lost) != 1 || rep.Lost[0].File != filepath.Base(seg) || len(got) != 599 {
			t.Fatalf("%s, recovered: lost %+v, %d records; want one stretch lost, 599 records", where, rep.Lost, len(got))
		}
		l.Close()
	}
}

// ReadOnly reports a torn tail and leaves the file as it is.
func TestReadOnlyLeavesATornTail(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	fill(t, l, 1, 5, 1)
	path, off, n := lastRecord(t, dir, l)
	l.Close()
	b, _ := os.ReadFile(path)
	clear(b[off+recHeader+1 : off+recLen(n)]) // the write stopped after a byte of its payload
	os.WriteFile(path, b, 0o600)
	l, rep, got := open(t, dir, Options{ReadOnly: true}, 0)
	if rep.Torn == nil || len(got) != 4 {
		t.Fatalf("read-only: torn %+v, %d records", rep.Torn, len(got))
	}
	if _, err := l.Append([][]byte{rec(9)}, true); err == nil {
		t.Fatal("a read-only log took an append")
	}
	after, _ := os.ReadFile(path)
	if !slices.Equal(after, b) {
		t.Fatal("read-only open changed the segment")
	}
}

// A newer format is refused, naming the segment and the versions.
func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	path := l.segs[0].path
	l.Close()
	b, _ := os.ReadFile(path)
	b[8] = Version + 1
	// A newer binary wrote this header: its checksum is right.
	copy(b[20:24], le32(crc32Header(b[:20])))
	os.WriteFile(path, b, 0o600)
	if _, _, err := Open(dir, Options{SegmentSize: testSegment}, 0, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrTooNew) {
		t.Fatalf("a newer segment: %v, want ErrTooNew", err)
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// An unsynced append is flushed by the next synced one, and Close
// flushes what is left.
func TestLazyAppendsAndClose(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	if _, err := l.Append([][]byte{rec(1)}, false); err != nil {
		t.Fatal(err)
	}
	if !l.dirty {
		t.Fatal("a lazy append was flushed")
	}
	if _, err := l.Append([][]byte{rec(2)}, true); err != nil || l.dirty {
		t.Fatalf("a synced append: %v, dirty %v", err, l.dirty)
	}
	l.Append([][]byte{rec(3)}, false)
	l.Close()
	if _, rep, _ := open(t, dir, Options{}, 0); rep.Records != 3 {
		t.Fatalf("%d records, want 3", rep.Records)
	}
}

// A record larger than a segment takes is refused, and nothing is
// written.
func TestRecordTooLarge(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := open(t, dir, Options{}, 0)
	if _, err := l.Append([][]byte{make([]byte, testSegment)}, true); err == nil {
		t.Fatal("a record over the segment size was taken")
	}
	if l.Next() != 1 {
		t.Fatalf("next %d after a refused append", l.Next())
	}
	l.Close()
}

// Every field a record or a segment's header is checked by: a byte
// changed in any of them, with good records after it, fails Open with
// ErrDamaged naming the segment and the offset (the record's, or 0 for
// the header), and Recover reports it lost. The trailer and the padding
// are the only bytes no checksum covers.
func TestEveryFieldIsChecked(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	l, _, _ := open(t, base, Options{}, 0)
	fill(t, l, 1, 1500, 6)
	if l.Segments() < 3 {
		t.Fatalf("%d segments, want 3 or more", l.Segments())
	}
	seg := filepath.Base(l.segs[1].path) // a segment in the middle
	l.Close()
	orig, err := os.ReadFile(filepath.Join(base, seg))
	if err != nil {
		t.Fatal(err)
	}
	// The third record of the segment: records before and after it.
	off := int64(headerLen)
	for range 2 {
		off += recLen(int64(le32of(orig[off:])))
	}
	for _, c := range []struct {
		what string
		at   int64 // the byte changed
		off  int64 // where the damage is named
	}{
		{"the header's magic", 3, 0},
		{"the header's version", 8, 0},
		{"the header's first sequence", 12, 0},
		{"the header's checksum", 21, 0},
		{"a record's length", off, off},
		{"a record's checksum", off + 5, off},
		{"a record's sequence", off + 8, off},
		{"a record's first payload byte", off + recHeader, off},
		{"a record's last payload byte", off + recHeader + int64(le32of(orig[off:])) - 1, off},
	} {
		dir := t.TempDir()
		copySegments(t, base, dir, seg)
		b := bytes.Clone(orig)
		b[c.at] ^= 0x01
		if err := os.WriteFile(filepath.Join(dir, seg), b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(dir, Options{SegmentSize: testSegment}, 0, func(uint64, []byte) error { return nil })
		var de *DamageError
		if !errors.As(err, &de) || de.File != seg || de.Offset != c.off {
			t.Fatalf("%s changed: %v; want ErrDamaged in %s at offset %d", c.what, err, seg, c.off)
		}
		_, rep, err := Open(dir, Options{SegmentSize: testSegment, Recover: true, ReadOnly: true}, 0, func(uint64, []byte) error { return nil })
		if err != nil || len(rep.Lost) == 0 || rep.Lost[0].File != seg || rep.Lost[0].Offset != c.off {
			t.Fatalf("%s changed, with Recover: %v, lost %+v; want a stretch of %s at offset %d", c.what, err, rep.Lost, seg, c.off)
		}
	}
}

func le32of(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// An append after a torn tail leaves none of the torn write's bytes
// behind, whether the new records are shorter than it or longer (up to
// the middle of it, or past its end): Open zeroed the tail. The segment
// holds zeros after the new records, and opens again with no torn tail
// and exactly the records written. Not zeroed, a short record would
// leave the old bytes to be cut again at every open, and a longer one,
// over a block the torn write never wrote, would leave the torn
// record's end with its trailer: damage, and a log that no longer
// opens.
func TestAppendAfterATornTailLeavesNoOldBytes(t *testing.T) {
	t.Parallel()
	torn := bytes.Repeat([]byte{0xab}, 5*block)
	for _, tear := range []string{"cut short", "a block unwritten"} {
		for _, size := range []int{100, 3 * block, 6 * block} {
			dir := t.TempDir()
			l, _, _ := open(t, dir, Options{}, 0)
			fill(t, l, 1, 5, 1)
			if _, err := l.Append([][]byte{torn}, true); err != nil {
				t.Fatal(err)
			}
			path, off, n := lastRecord(t, dir, l)
			l.Close()
			b, _ := os.ReadFile(path)
			if tear == "cut short" { // the write reached the disk up to a byte in its second block
				clear(b[off+block+100 : off+recLen(n)])
			} else { // a block of it never did; its end, trailer and all, did
				first := (off + block - 1) / block * block
				clear(b[first : first+block])
			}
			os.WriteFile(path, b, 0o600)

			l, rep, got := open(t, dir, Options{}, 0)
			if rep.Torn == nil || rep.Torn.Offset != off || len(got) != 5 {
				t.Fatalf("%s: torn %+v, %d records; want the tail at %d cut, 5 records", tear, rep.Torn, len(got), off)
			}
			fresh := bytes.Repeat([]byte{0x11}, size)
			if _, err := l.Append([][]byte{fresh}, true); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append([][]byte{rec(7)}, true); err != nil {
				t.Fatal(err)
			}
			end := l.off
			l.Close()

			after, _ := os.ReadFile(path)
			if i := slices.IndexFunc(after[end:], func(c byte) bool { return c != 0 }); i >= 0 {
				t.Fatalf("%s, then %d bytes: a byte of the torn write is still there at offset %d, after the new records", tear, size, end+int64(i))
			}
			l, rep, got = open(t, dir, Options{}, 0)
			if rep.Torn != nil || len(rep.Lost) > 0 || len(got) != 7 || !bytes.Equal(got[6], fresh) || !bytes.Equal(got[7], rec(7)) || l.Next() != 8 {
				t.Fatalf("%s, then %d bytes, reopened: torn %+v, lost %+v, %d records, next %d; want no cut, records 1 to 7 as written", tear, size, rep.Torn, rep.Lost, len(got), l.Next())
			}
		}
	}
}

// mountCut mounts a power-cut layer (internal/cutfs) over root, or
// skips (fails with EMQ_REQUIRE_FUSE set, as in CI).
func mountCut(t *testing.T, root string) *cutfs.FS {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cutfs needs root to mount FUSE")
	}
	c, err := cutfs.Mount(root, filepath.Join(t.TempDir(), "mnt"))
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cannot mount FUSE (/dev/fuse, fuse3): %v", err)
	}
	t.Cleanup(func() { c.Unmount() })
	return c
}

// A power cut while the log starts its next segment, after each write
// of the Append that starts it (the new segment's header, the records),
// whole or torn: the log opens again with every record an Append
// returned for (and the one cut, if what reached the disk of it is
// whole), and goes on. A segment's name never reaches the disk before
// its header: a segment named, its header lost, would fail its checks,
// and the log would not open.
func TestPowerCutWhileASegmentStarts(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for n := 1; n <= 2; n++ {
		for _, tear := range []bool{false, true} {
			root := t.TempDir()
			fs := mountCut(t, root)
			l, _, _ := open(t, fs.Dir(), Options{}, 0)
			i := 1
			for l.off < testSegment/2+1024 {
				fill(t, l, i, 10, 10)
				i += 10
			}
			if l.spare == nil {
				t.Fatal("past half a segment, and no spare being made")
			}
			if err := <-l.spare; err != nil { // made: the cut lands on the Append's own writes
				t.Fatal(err)
			}
			l.spare = nil
			acked, segs := l.Next()-1, l.Segments()
			cut := fs.CutAfter(n, tear, rng)
			cutRec := bytes.Repeat([]byte("cut "), testSegment/8)
			if _, err := l.Append([][]byte{cutRec}, true); err == nil {
				t.Fatalf("cut after write %d (tear %v): the Append that started a segment returned no error", n, tear)
			}
			what := testutil.Recv(t, cut, "the cut")
			l.Close()
			if err := fs.Unmount(); err != nil {
				t.Fatal(err)
			}
			l, rep, got := open(t, root, Options{}, 0)
			for k := uint64(1); k <= acked; k++ {
				if !bytes.Equal(got[k], rec(int(k))) {
					t.Fatalf("cut after write %d (%s): record %d, ACKed, reopened as %q", n, what, k, got[k])
				}
			}
			if len(got) > int(acked) && !bytes.Equal(got[acked+1], cutRec) || len(got) > int(acked)+1 || l.Next() != uint64(len(got))+1 {
				t.Fatalf("cut after write %d (%s): reopened with %d records, next %d; want the %d ACKed, and the one cut only if whole (torn %+v)", n, what, len(got), l.Next(), acked, rep.Torn)
			}
			fill(t, l, int(l.Next()), 1, 1)
			if l.Segments() > segs+1 {
				t.Fatalf("cut after write %d (%s): %d segments, want at most %d", n, what, l.Segments(), segs+1)
			}
			l.Close()
		}
	}
}
