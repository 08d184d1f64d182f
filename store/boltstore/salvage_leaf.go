package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/eventmq/emq/store"
)

// A leaf page whose element headers are damaged still holds its keys and
// values where bbolt wrote them: one after the other, in key order,
// right after the headers (inode.go's WriteInodeToPage). So an element
// whose header does not fit that layout is looked for in the bytes
// between the end of the element before it and the start of the next
// element whose header does fit: every split of those bytes into a key
// (up to maxKey bytes) and a value whose seal holds for a bucket, keys
// in order with their neighbours'. The seal is a CRC-32C: a search
// tries at most a few million splits, so a false find is unlikely (and
// a job's must also decode as a job record); what is found nowhere is
// named.

// maxKey is the longest key a search tries: a msgid is at most 255
// bytes, an index key a queue's name and a sequence.
const maxKey = 512

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// scanLeaf reads the values of leaf page b (its header first; an inline
// bucket's page too). within is what its parent says of it: the bucket
// of its values (nil: the one each value's seal names; elements that are
// buckets are read inline) and the range of its keys. It returns the
// values whose seals hold and what it could not read.
func scanLeaf(b []byte, within keyRange) (vals []pageValue, unread []string) {
	if len(b) < pageHeader+elementSize {
		return nil, nil
	}
	s := &leafScan{b: b, within: within, names: buckets}
	s.n, s.counted = leafCount(b)
	if within.bucket != nil {
		s.names = [][]byte{within.bucket}
	}
	s.scan()
	return s.vals, s.unread
}

type leafScan struct {
	b       []byte
	n       int  // elements
	counted bool // n is the page's, as far as its headers tell
	within  keyRange
	names   [][]byte // the buckets a value may be of
	vals    []pageValue
	unread  []string
	prev    []byte // the last key read whose value checks
}

// head is element i's header: where its key starts (in b), its sizes;
// fits: they lie in the page, after the headers.
func (s *leafScan) head(i int) (flags uint32, start, ksize, vsize int, fits bool) {
	e := s.b[pageHeader+i*elementSize:]
	flags = binary.LittleEndian.Uint32(e)
	start = pageHeader + i*elementSize + int(binary.LittleEndian.Uint32(e[4:]))
	ksize, vsize = int(binary.LittleEndian.Uint32(e[8:])), int(binary.LittleEndian.Uint32(e[12:]))
	fits = start >= pageHeader+s.n*elementSize && ksize > 0 && start <= len(s.b) && ksize <= len(s.b)-start && vsize <= len(s.b)-start-ksize
	return
}

// chained: element i's header fits, and the next one starts where it
// ends.
func (s *leafScan) chained(i int) bool {
	_, start, ks, vs, fits := s.head(i)
	if !fits {
		return false
	}
	if i+1 == s.n {
		return true
	}
	_, next, _, _, _ := s.head(i + 1)
	return next == start+ks+vs
}

// take is key's value val, of the bucket whose seal holds.
func (s *leafScan) take(key, val []byte) (pageValue, bool) {
	for _, name := range s.names {
		if v, ok := take1(name, key, val); ok {
			return v, true
		}
	}
	return pageValue{}, false
}

// keep keeps v, a value of the page's own (not of a bucket inline in it):
// the page is then a leaf of v's bucket, whose values all are of it.
func (s *leafScan) keep(v pageValue) {
	s.vals = append(s.vals, v)
	s.prev = v.key
	if s.within.bucket == nil {
		s.within.bucket, s.names = v.bucket, [][]byte{v.bucket}
	}
}

// accept says whether a search's find may be an element here: its key
// after the last read, before bound (nil: none) and in the page's range;
// a job's value a job record.
func (s *leafScan) accept(bound []byte) func(bucket, key, val []byte) bool {
	return func(bucket, key, val []byte) bool {
		if s.prev != nil && bytes.Compare(key, s.prev) <= 0 || bound != nil && bytes.Compare(key, bound) >= 0 ||
			s.within.lo != nil && bytes.Compare(key, s.within.lo) < 0 || s.within.hi != nil && bytes.Compare(key, s.within.hi) >= 0 {
			return false
		}
		if bytes.Equal(bucket, store.BucketJobs) {
			_, err := store.DecodeJob(key, val)
			return err == nil
		}
		return true
	}
}

// fails names key, whose value fails its checksum.
func (s *leafScan) fails(key []byte) string {
	if s.within.bucket != nil {
		return fmt.Sprintf("%s/%q: its checksum fails", s.within.bucket, key)
	}
	return fmt.Sprintf("key %q: its value fails its checksum", key)
}

// inline reads the page of bucket name kept inline in its element; name
// nil: a bucket whose name is damaged.
func (s *leafScan) inline(name, page []byte) {
	in, un := scanLeaf(page, keyRange{bucket: name})
	s.vals = append(s.vals, in...)
	label := string(name)
	if name == nil {
		label = "whose name is damaged"
	}
	for _, u := range un {
		s.unread = append(s.unread, fmt.Sprintf("bucket %s (inline): %s", label, u))
	}
}

func (s *leafScan) scan() {
	b := s.b
	if !s.counted {
		// No header tells how many elements there are: they are looked for
		// from the first place the first can start.
		s.between(0, 0, pageHeader+elementSize, len(b), nil)
		return
	}
	at := pageHeader + s.n*elementSize
	for i := 0; i < s.n && at < len(b); {
		flags, start, ks, vs, fits := s.head(i)
		if fits && start == at {
			key, val, end := b[start:start+ks], b[start+ks:start+ks+vs], start+ks+vs
			chained := s.chained(i)
			if flags&bucketElement != 0 && chained && s.within.bucket == nil && slices.ContainsFunc(buckets, func(n []byte) bool { return bytes.Equal(n, key) }) {
				if len(val) > bucketHeader { // a bucket with pages elsewhere has only its header
					s.inline(bytes.Clone(key), val[bucketHeader:])
				}
				at = end
				i++
				continue
			}
			if v, ok := s.take(key, val); ok {
				s.keep(v)
				at = end
				i++
				continue
			}
			if i+1 == s.n {
				// The last: nothing after it says where it ends, so its
				// header may be what is damaged.
				if v, e, ok := search(b[at:], s.names, false, s.accept(nil)); ok {
					s.keep(v)
					at += e
					i++
					continue
				}
			}
			if chained && flags&bucketElement != 0 && s.within.bucket == nil && len(val) > bucketHeader {
				// A bucket kept inline whose name is damaged: its values'
				// seals say whose they are.
				s.inline(nil, val[bucketHeader:])
				at = end
				i++
				continue
			}
			if chained {
				// The layout holds around it: its bytes changed.
				s.unread = append(s.unread, s.fails(key))
				at = end
				i++
				continue
			}
		}
		// Elements i to j-1 have headers that do not fit: they lie between
		// at and where element j starts (or the page ends).
		j := i + 1
		for ; j < s.n; j++ {
			// An anchor: a header that fits, at least a key and a seal
			// further on, chained to the next or with a seal that holds.
			_, start, ks, vs, fits := s.head(j)
			if !fits || start < at+5 {
				continue
			}
			if s.chained(j) && j+1 < s.n { // the last is chained to nothing
				break
			}
			if _, ok := s.take(b[start:start+ks], b[start+ks:start+ks+vs]); ok {
				break
			}
		}
		end := len(b)
		var bound []byte // the key after them
		if j < s.n {
			_, end, ks, _, _ = s.head(j)
			bound = b[end : end+ks]
		}
		s.between(i, j, at, end, bound)
		at = end
		i = j
	}
}

// between reads elements i to j-1, whose headers do not fit, from
// b[at:end], before the key bound (nil: none); with the page's count
// unknown, as many as it finds.
func (s *leafScan) between(i, j, at, end int, bound []byte) {
	b := s.b
	for k := i; at < end && (k < j || !s.counted); k++ {
		accept := s.accept(bound)
		// The last of them ends where element j starts: tried first.
		v, e, ok := pageValue{}, 0, false
		if k == j-1 && bound != nil {
			v, e, ok = search(b[at:end], s.names, true, accept)
		}
		if !ok {
			v, e, ok = search(b[at:end], s.names, false, accept)
		}
		if ok {
			s.keep(v)
			at += e
			continue
		}
		if s.within.bucket == nil {
			// Of the root bucket: a bucket's element, its name first.
			if name, inline, e, ok := bucketAt(b[at:end], k == j-1 && bound != nil); ok && accept(nil, name, nil) {
				s.inline(name, inline)
				at = at + e
				continue
			}
		}
		if k < s.n {
			if _, start, ks, vs, fits := s.head(k); k < j && fits && start == at && start+ks+vs <= end {
				// Nothing checks here, but its header says where it ends:
				// the next element is looked for after it.
				s.unread = append(s.unread, s.fails(b[start:start+ks]))
				at = start + ks + vs
				continue
			}
		}
		// Further on, where a key of the page's range starts.
		next, ok := s.resync(at, end, accept)
		if !ok {
			if k < j {
				s.unread = append(s.unread, fmt.Sprintf("bytes %d to %d: %d element(s) whose headers are damaged, and no value there checks", at, end, j-k))
			} else {
				s.unread = append(s.unread, fmt.Sprintf("bytes %d to %d: no value there checks (the page's headers are damaged: what they held there, if anything, is lost)", at, end))
			}
			return
		}
		if k < j || s.prev != nil {
			s.unread = append(s.unread, fmt.Sprintf("bytes %d to %d: damaged, no value there checks", at, next))
		}
		at = next
	}
}

// resync finds the next place after at, before end, where an element
// whose value checks starts with a key of the page's range: found by the
// first bytes the range's keys (or the keys read around the damage)
// share. It returns where, or ok false.
func (s *leafScan) resync(at, end int, accept func(bucket, key, val []byte) bool) (int, bool) {
	lower, upper := s.prev, []byte(nil)
	if lower == nil {
		lower = s.within.lo
	}
	upper = s.within.hi
	var prefix []byte
	switch {
	case lower != nil && upper != nil:
		n := 0
		for n < len(lower) && n < len(upper) && lower[n] == upper[n] {
			n++
		}
		prefix = lower[:n]
	case lower != nil:
		prefix = lower[:len(lower)/2]
	case upper != nil:
		prefix = upper[:len(upper)/2]
	}
	if len(prefix) < 2 {
		return 0, false
	}
	for from := at + 1; from < end; {
		q := bytes.Index(s.b[from:end], prefix)
		if q < 0 {
			return 0, false
		}
		if _, _, ok := search(s.b[from+q:end], s.names, false, accept); ok {
			return from + q, true
		}
		from += q + 1
	}
	return 0, false
}

// take1 is key's value val, sealed for bucket, with its seal checked
// and taken off; the schema version, which has none, as it is.
func take1(bucket, key, val []byte) (pageValue, bool) {
	if !store.Sealed(bucket, key) {
		return pageValue{bucket: bucket, key: bytes.Clone(key), val: bytes.Clone(val)}, true
	}
	v, ok := unseal(bucket, key, val)
	if !ok {
		return pageValue{}, false
	}
	return pageValue{bucket: bucket, key: bytes.Clone(key), val: bytes.Clone(v)}, true
}

// leafCount is how many elements leaf page b has: its header's count,
// when the first element's position agrees (the keys and values start
// right after the headers); else the count under which the most
// elements' headers fit the layout, each ending where the next starts
// (the last anywhere in the page): of counts as good, the header's, else
// the largest (a damaged header of the first elements may fit as a page
// of fewer). counted false: none fits.
func leafCount(b []byte) (n int, counted bool) {
	most := (len(b) - pageHeader) / elementSize
	n = int(binary.LittleEndian.Uint16(b[10:]))
	if n > 0 && n <= most && int(binary.LittleEndian.Uint32(b[pageHeader+4:])) == n*elementSize {
		return n, true
	}
	// where element i's key starts, and where its value ends
	span := func(i int) (start, end int) {
		e := b[pageHeader+i*elementSize:]
		start = pageHeader + i*elementSize + int(binary.LittleEndian.Uint32(e[4:]))
		return start, start + int(binary.LittleEndian.Uint32(e[8:])) + int(binary.LittleEndian.Uint32(e[12:]))
	}
	score := func(c int) int {
		fit := 0
		for i := range c {
			start, end := span(i)
			if start < pageHeader+c*elementSize || end > len(b) || end <= start {
				continue
			}
			if i+1 == c {
				fit++
			} else if next, _ := span(i + 1); next == end {
				fit++
			}
		}
		return fit
	}
	best, bestScore := 0, 0
	for c := 1; c <= min(most, maxCount); c++ {
		if sc := score(c); sc > 0 && sc >= bestScore {
			best, bestScore = c, sc
		}
	}
	if n > 0 && n <= min(most, maxCount) && bestScore > 0 && score(n) == bestScore {
		best = n
	}
	return best, bestScore > 0
}

// maxCount is the most elements leafCount tries: a page takes more than
// one only for a value larger than a page, so its headers fit in the
// first (1,024 of them: 16 KiB pages).
const maxCount = 1024

// bucketAt reads a bucket's element at the start of s, in a page of the
// root bucket: its key one of the journal's buckets, then the bucket's
// header, then its page if it is kept inline. The element ends at the end
// of s when exact; else where its inline page ends, when its layout says.
func bucketAt(s []byte, exact bool) (name, inline []byte, end int, ok bool) {
	for _, name := range bucketsByLength {
		if !bytes.HasPrefix(s, name) || len(s) < len(name)+bucketHeader {
			continue
		}
		if binary.LittleEndian.Uint64(s[len(name):]) != 0 { // its pages are elsewhere
			end = len(name) + bucketHeader
			if exact && end != len(s) {
				continue
			}
			return name, nil, end, true
		}
		inline = s[len(name)+bucketHeader:]
		if elems, ok, short := leafLayout(inline, len(inline)); ok && !short && !exact {
			used := pageHeader + len(elems)*elementSize
			for _, e := range elems {
				used += len(e.key) + len(e.val)
			}
			inline = inline[:used]
		}
		return name, inline, len(name) + bucketHeader + len(inline), true
	}
	return nil, nil, 0, false
}

// bucketsByLength are the journal's buckets, longest name first (after
// before after_batch would read the second as the first).
var bucketsByLength = func() [][]byte {
	out := slices.Clone(buckets)
	slices.SortStableFunc(out, func(a, b []byte) int { return len(b) - len(a) })
	return out
}()

// search looks for one element at the start of s: a key of 1 to maxKey
// bytes, then a value with a seal that holds for one of names, ending at
// the end of s when exact, else anywhere. It returns the value and where
// it ends.
func search(s []byte, names [][]byte, exact bool, accept func(bucket, key, val []byte) bool) (pageValue, int, bool) {
	zero := []byte{0}
	for _, name := range names {
		pre := crc32.Update(crc32.Update(0, castagnoliTable, name), castagnoliTable, zero)
		for kl := 1; kl <= maxKey && kl+4 <= len(s); kl++ {
			if exact {
				if v, ok := unseal(name, s[:kl], s[kl:]); ok && accept(name, s[:kl], v) {
					return pageValue{bucket: name, key: bytes.Clone(s[:kl]), val: bytes.Clone(v)}, len(s), true
				}
				continue
			}
			// The value grows a byte at a time; x is the CRC (inverted)
			// of the name, the key and the value so far.
			x := ^crc32.Update(crc32.Update(pre, castagnoliTable, s[:kl]), castagnoliTable, zero)
			for e := kl + 4; e <= len(s); e++ {
				if ^x == binary.LittleEndian.Uint32(s[e-4:]) {
					if v := s[kl : e-4]; accept(name, s[:kl], v) {
						return pageValue{bucket: name, key: bytes.Clone(s[:kl]), val: bytes.Clone(v)}, e, true
					}
				}
				if e < len(s) {
					x = castagnoliTable[byte(x)^s[e-4]] ^ (x >> 8)
				}
			}
		}
	}
	return pageValue{}, 0, false
}
