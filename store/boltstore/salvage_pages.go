package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/eventmq/emq/store"
)

// When bbolt cannot read the file (it fails opening it, or pageCheck
// finds a page out of place, which bbolt would trip on), Salvage reads it
// here, page by page, over bbolt's on-disk layout (go.etcd.io/bbolt v1.5,
// internal/common: page.go, meta.go, bucket.go, inode.go):
//
//   - page id at offset id×page size; a header of id u64, flags u16,
//     count u16, overflow u32 (the pages after it that it also takes);
//     flags 0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist;
//   - pages 0 and 1 are metas: magic, version, page size, flags (u32
//     each), the root bucket {root pgid, sequence}, the freelist's pgid,
//     the high-water pgid, the txid, and an FNV-64a of what precedes it;
//     the valid one with the higher txid is the file;
//   - a leaf's count elements {flags, pos, ksize, vsize u32}, a branch's
//     {pos, ksize u32, pgid u64}, pos counted from the element; then the
//     keys and values one after the other, in key order (the layout a
//     damaged element header is read back from: salvage_leaf.go);
//   - an element with flag 0x01 is a bucket: its value is {root pgid,
//     sequence}, and, when root is 0, the bucket's one page inline after
//     it;
//   - the freelist page: count ids u64 (count 0xFFFF: the first u64 is
//     the count), the free pages and those a commit freed.
//
// Every value of ours is sealed (store.Seal) with its bucket's name and
// its key, so a value read off any page tells by itself whether it is
// whole and which bucket it is of. What the file's structure adds is
// which values are live: bbolt copies on write, so a page freed by a
// commit still holds what the commit replaced (an older record of a job,
// a job since completed). So values are taken from the tree a valid meta
// page reaches; where a page of that tree is damaged, the keys it held
// (the range its parent names, grown to hold its own keys when it is
// whole but they lie outside it: the parent's key may be what changed)
// are taken from the pages that are neither
// in the tree nor on the freelist: in a file bbolt wrote, every page
// below the high-water mark is a meta, the freelist's, the tree's or
// free, so those pages are the damaged part's. When the freelist itself
// cannot be trusted (damaged, or naming a page the tree holds), free
// pages cannot be told from live ones: values under the damaged part are
// then taken from any page outside the tree, the newest copy of each
// key (a job's own record says which: its trail, its attempts). A job
// completed before the last checkpoint may then come back, and run
// again: at-least-once delivery allows a second run, and a live job
// whose value is whole is never left behind. The report says so.

// bbolt's layout (see above).
const (
	pageHeader     = 16
	elementSize    = 16
	metaSize       = 64
	branchFlag     = 0x01
	leafFlag       = 0x02
	freelistFlag   = 0x10
	bucketElement  = 0x01
	bucketHeader   = 16
	boltVersion    = 2
	firstDataPage  = 2
	maxFreelistIDs = 1 << 28 // more than a file of a terabyte has pages of 4 KiB
)

// pageFile reads a bbolt file's pages with ReadAt, trusting nothing it
// reads. It reads ahead a block at a time: a walk of the tree goes
// mostly forward, and a system call a page would cost it more than bbolt
// takes to check the file from its mapping.
type pageFile struct {
	f       *os.File
	size    int64
	ps      int64  // page size
	block   []byte // what was read ahead, from blockAt
	blockAt int64
}

// readAhead is the most a read brings in at once.
const readAhead = 256 << 10

// view is page id as read ahead, valid until the next read.
func (pf *pageFile) view(id uint64) ([]byte, error) {
	off := int64(id) * pf.ps
	if id >= uint64(pf.size/pf.ps) {
		return nil, fmt.Errorf("page %d: past the end of the file", id)
	}
	if off < pf.blockAt || off+pf.ps > pf.blockAt+int64(len(pf.block)) {
		if _, err := pf.pages(id, 1); err != nil {
			return nil, err
		}
	}
	return pf.block[off-pf.blockAt : off-pf.blockAt+pf.ps], nil
}

// pages reads n pages from id, or as many as the file holds: a copy, the
// caller's to keep.
func (pf *pageFile) pages(id uint64, n uint64) ([]byte, error) {
	if n == 0 || id > uint64(pf.size/pf.ps) || n > uint64(pf.size/pf.ps)-id+1 {
		return nil, fmt.Errorf("page %d: past the end of the file", id)
	}
	off := int64(id) * pf.ps
	b := make([]byte, min(int64(n)*pf.ps, pf.size-off))
	if len(b) < pageHeader {
		return nil, fmt.Errorf("page %d: past the end of the file", id)
	}
	if off < pf.blockAt || off+int64(len(b)) > pf.blockAt+int64(len(pf.block)) {
		if len(b) > readAhead {
			if _, err := pf.f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("page %d: %w", id, err)
			}
			return b, nil
		}
		if pf.block == nil {
			pf.block = make([]byte, readAhead)
		}
		k, err := pf.f.ReadAt(pf.block[:min(readAhead, pf.size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			pf.block = pf.block[:0]
			return nil, fmt.Errorf("page %d: %w", id, err)
		}
		pf.block, pf.blockAt = pf.block[:k], off
		if k < len(b) {
			return nil, fmt.Errorf("page %d: past the end of the file", id)
		}
	}
	copy(b, pf.block[off-pf.blockAt:])
	return b, nil
}

type pageHead struct {
	id       uint64
	flags    uint16
	count    uint16
	overflow uint32
}

func headOf(b []byte) pageHead {
	return pageHead{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint16(b[8:]), binary.LittleEndian.Uint16(b[10:]), binary.LittleEndian.Uint32(b[12:])}
}

// boltMeta is a valid meta page.
type boltMeta struct {
	page     uint64 // 0 or 1
	pageSize uint32
	root     uint64
	freelist uint64
	hwm      uint64 // pages below it are the file's
	txid     uint64
}

// metaOf reads the meta of page b (its header and what follows).
func metaOf(b []byte) (boltMeta, error) {
	if len(b) < pageHeader+metaSize {
		return boltMeta{}, errors.New("it is cut short")
	}
	m := b[pageHeader:]
	h := fnv.New64a()
	h.Write(m[:56])
	switch {
	case binary.LittleEndian.Uint32(m) != boltMagic:
		return boltMeta{}, errors.New("it is not a bbolt meta page")
	case binary.LittleEndian.Uint32(m[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("it is of bbolt's version %d", binary.LittleEndian.Uint32(m[4:]))
	case h.Sum64() != binary.LittleEndian.Uint64(m[56:]):
		return boltMeta{}, errors.New("it fails its checksum")
	}
	return boltMeta{
		page:     binary.LittleEndian.Uint64(b),
		pageSize: binary.LittleEndian.Uint32(m[8:]),
		root:     binary.LittleEndian.Uint64(m[16:]),
		freelist: binary.LittleEndian.Uint64(m[32:]),
		hwm:      binary.LittleEndian.Uint64(m[40:]),
		txid:     binary.LittleEndian.Uint64(m[48:]),
	}, nil
}

// readMetas finds the page size and the file's current meta: the valid
// one of pages 0 and 1 with the higher txid. Page 1 is looked for where
// bbolt looks for it when page 0 cannot say the page size. With neither
// valid, the page size is the one most pages' headers agree with.
func readMetas(f *os.File, size int64) (ps int64, cur *boltMeta, problems []string) {
	var metas []boltMeta
	buf := make([]byte, pageHeader+metaSize)
	m0, err := metaAt(f, buf, 0)
	if err == nil {
		ps = int64(m0.pageSize)
		metas = append(metas, m0)
	} else {
		problems = append(problems, "meta page 0: "+err.Error())
	}
	var m1 boltMeta
	err1 := errors.New("it cannot be found")
	if ps > 0 {
		m1, err1 = metaAt(f, buf, ps)
	} else {
		for i := range 15 { // page sizes from 1 KiB to 16 MiB, as bbolt tries them
			at := int64(1024) << i
			if at >= size {
				break
			}
			if m, err := metaAt(f, buf, at); err == nil && int64(m.pageSize) == at {
				m1, err1, ps = m, nil, at
				break
			}
		}
	}
	if err1 == nil {
		metas = append(metas, m1)
	} else {
		problems = append(problems, "meta page 1: "+err1.Error())
	}
	if ps <= 0 || ps%pageHeader != 0 {
		ps = guessPageSize(f, size)
		problems = append(problems, fmt.Sprintf("no meta page says the page size: %d read from the pages' headers", ps))
	}
	for i := range metas {
		if m := &metas[i]; m.page > 1 || int64(m.pageSize) != ps || m.hwm <= firstDataPage || m.root >= m.hwm || m.root < firstDataPage ||
			m.freelist != noFreelist && (m.freelist >= m.hwm || m.freelist < firstDataPage) {
			problems = append(problems, fmt.Sprintf("meta page %d: it names pages that cannot be (root %d, freelist %d, %d pages)", m.page, m.root, m.freelist, m.hwm))
			continue
		}
		if cur == nil || metas[i].txid > cur.txid {
			cur = &metas[i]
		}
	}
	return ps, cur, problems
}

func metaAt(f *os.File, buf []byte, off int64) (boltMeta, error) {
	if _, err := f.ReadAt(buf, off); err != nil {
		return boltMeta{}, fmt.Errorf("it cannot be read: %w", err)
	}
	return metaOf(buf)
}

// guessPageSize is the page size under which the most of the file's
// first pages name themselves in their headers.
func guessPageSize(f *os.File, size int64) int64 {
	best, bestN := int64(os.Getpagesize()), 0
	buf := make([]byte, pageHeader)
	for ps := int64(1024); ps <= 64<<10; ps *= 2 {
		n := 0
		for id := int64(firstDataPage); id < min(size/ps, 256); id++ {
			if _, err := f.ReadAt(buf, id*ps); err == nil {
				if h := headOf(buf); h.id == uint64(id) && (h.flags == leafFlag || h.flags == branchFlag || h.flags == freelistFlag) {
					n++
				}
			}
		}
		if n > bestN {
			best, bestN = ps, n
		}
	}
	return best
}

// keyRange is the keys of a bucket (nil: of every bucket) from lo to hi,
// hi excluded; a nil end is open.
type keyRange struct {
	bucket []byte
	lo, hi []byte
}

func (r keyRange) holds(bucket, key []byte) bool {
	return (r.bucket == nil || bytes.Equal(r.bucket, bucket)) &&
		(r.lo == nil || bytes.Compare(key, r.lo) >= 0) && (r.hi == nil || bytes.Compare(key, r.hi) < 0)
}

func (r keyRange) String() string {
	name := "every bucket"
	if r.bucket != nil {
		name = "bucket " + string(r.bucket)
	}
	switch {
	case r.lo == nil && r.hi == nil:
		return name
	case r.lo == nil:
		return fmt.Sprintf("%s, keys before %q", name, r.hi)
	case r.hi == nil:
		return fmt.Sprintf("%s, keys from %q", name, r.lo)
	}
	return fmt.Sprintf("%s, keys from %q to %q", name, r.lo, r.hi)
}

// pageValue is a value found on a page, its checksum checked and taken
// off (the schema version, never sealed, as it is).
type pageValue struct {
	bucket, key, val []byte
	page             uint64
}

// pageSet is a set of page ids below the high-water mark.
type pageSet []uint64

func newPageSet(hwm uint64) pageSet { return make(pageSet, (hwm+63)/64) }
func (s pageSet) has(p uint64) bool {
	return s != nil && p/64 < uint64(len(s)) && s[p/64]&(1<<(p%64)) != 0
}
func (s pageSet) add(from, n uint64) {
	for p := from; p < from+n; p++ {
		s[p/64] |= 1 << (p % 64)
	}
}
func (s pageSet) addOne(p uint64) bool { had := s.has(p); s.add(p, 1); return !had }

// treeWalk walks the tree from a meta page. keysOnly, it reads the
// first page of each node and the keys (a check of the structure, which
// reads no value); else every page whole, taking the values.
type treeWalk struct {
	pf        *pageFile
	hwm       uint64
	keysOnly  bool
	tree      pageSet             // the pages of the tree's sound nodes
	seen      pageSet             // every page the tree names, damaged ones too
	under     map[uint64]keyRange // where each sound node is in the tree
	lost      []keyRange          // what damaged nodes held
	damagedAt map[uint64]keyRange // the damaged nodes' pages: what they held
	vals      []pageValue
	bad       []string   // values that fail their checksums
	notes     []string   // what is wrong with the structure
	elems     []leafElem // a bucket's leaf's, reused
}

func newTreeWalk(pf *pageFile, hwm uint64, keysOnly bool) *treeWalk {
	return &treeWalk{pf: pf, hwm: hwm, keysOnly: keysOnly, tree: newPageSet(hwm), seen: newPageSet(hwm), under: map[uint64]keyRange{}, damagedAt: map[uint64]keyRange{}}
}

// damaged notes that page id, named under r, could not be read.
func (w *treeWalk) damaged(r keyRange, id uint64, why string) {
	w.lost = append(w.lost, r)
	if _, twice := w.damagedAt[id]; twice {
		w.damagedAt[id] = keyRange{} // named under two ranges: neither is known to be its own
	} else {
		w.damagedAt[id] = r
	}
	w.notes = append(w.notes, fmt.Sprintf("page %d (%s): %s", id, r, why))
}

// read reads page id of the tree, checking its header: it must name
// itself, be a branch or a leaf, and lie below the high-water mark. It
// returns the node's pages (keysOnly, the first of them) and how many
// it takes.
//
// passing: the caller is done with it before it reads another page (a
// leaf of a bucket: it names no page); keysOnly, it is then given the
// page as read ahead, not a copy.
func (w *treeWalk) read(id uint64, passing bool) ([]byte, pageHead, uint64, error) {
	if id < firstDataPage || id >= w.hwm {
		return nil, pageHead{}, 0, fmt.Errorf("the tree names it, but the file's pages are 2 to %d", w.hwm-1)
	}
	b, err := w.pf.view(id)
	if err != nil {
		return nil, pageHead{}, 0, err
	}
	h := headOf(b)
	span := uint64(h.overflow) + 1
	switch {
	case h.id != id:
		return nil, h, 0, fmt.Errorf("its header names page %d", h.id)
	case h.flags != leafFlag && h.flags != branchFlag:
		return nil, h, 0, fmt.Errorf("its header says neither branch nor leaf (flags %#x)", h.flags)
	case uint64(h.overflow) >= w.hwm-id || int64(id+span)*w.pf.ps > w.pf.size:
		return nil, h, 0, fmt.Errorf("its header says it takes %d more pages, past the file's", h.overflow)
	}
	switch {
	case span > 1 && !w.keysOnly:
		b, err = w.pf.pages(id, span)
	case !w.keysOnly || !passing || h.flags != leafFlag:
		b = bytes.Clone(b)
	}
	return b, h, span, err
}

// bucket walks the pages of one bucket (name nil: the root bucket, whose
// elements are the buckets) from page id, whose keys its parent says lie
// in r.
func (w *treeWalk) bucket(name []byte, id uint64, r keyRange) {
	if id < w.hwm && !w.seen.addOne(id) {
		// Named twice: a damaged branch names a page of another part of
		// the tree. Both parts' keys are looked for outside it.
		w.damaged(r, id, "the tree names it twice")
		if first, ok := w.under[id]; ok {
			w.lost = append(w.lost, first)
		}
		return
	}
	b, h, span, err := w.read(id, name != nil)
	if err != nil {
		w.damaged(r, id, err.Error())
		return
	}
	size := int(span) * int(w.pf.ps)
	if h.flags == branchFlag {
		keys, kids, ok, short := branchLayout(b, size)
		if short { // keys past the node's first page
			if b, err = w.pf.pages(id, span); err == nil {
				keys, kids, ok, _ = branchLayout(b, size)
			}
		}
		if ok && inOrder(keys, keyRange{}) && !inOrder(keys, r) {
			w.damaged(rangeOfBranch(r, keys), id, "its keys lie outside the range its parent names")
			return
		}
		if !ok || !inOrder(keys, r) {
			w.damaged(r, id, "its elements are not a branch's, or out of order")
			return
		}
		w.sound(id, span, r)
		for i, kid := range kids {
			kr := keyRange{bucket: r.bucket, lo: r.lo, hi: r.hi}
			if i > 0 {
				kr.lo = bytes.Clone(keys[i])
			}
			if i+1 < len(keys) {
				kr.hi = bytes.Clone(keys[i+1])
			}
			w.bucket(name, kid, kr)
		}
		return
	}
	elems := w.elems[:0]
	if name == nil {
		elems = nil // walked while the buckets are
	}
	elems, ok, short := leafLayoutInto(elems, b, size)
	if short && (elems == nil || !w.keysOnly || name == nil) { // keys, values wanted, or a root bucket's past the first page
		if b, err = w.pf.pages(id, span); err == nil {
			elems, ok, _ = leafLayoutInto(elems, b, size)
		}
	}
	if name != nil {
		w.elems = elems
	}
	if ok && elemsInOrder(elems, keyRange{}) && !elemsInOrder(elems, r) {
		w.damaged(rangeOfLeaf(r, name, elems), id, "its keys lie outside the range its parent names")
		return
	}
	if !ok || !elemsInOrder(elems, r) {
		w.damaged(r, id, "its elements are not laid out as bbolt lays them, or out of order")
		return
	}
	w.sound(id, span, r)
	w.leaf(name, id, elems)
}

// A node laid out whole, its keys in order, but not all in the range its
// parent names: the damage may have changed the parent's key, not the
// node, so the node is taken as damaged (its keys looked for outside the
// tree, where it now is) under a range grown to hold its own keys:
// rangeOfLeaf, rangeOfBranch.

// rangeOfLeaf is r grown to hold the keys of elems whose seals hold (a
// key the damage changed fails its seal, and grows nothing).
func rangeOfLeaf(r keyRange, name []byte, elems []leafElem) keyRange {
	for _, e := range elems {
		if store.Sealed(name, e.key) {
			if _, ok := unseal(name, e.key, e.val); !ok {
				continue
			}
		}
		if r.lo != nil && bytes.Compare(e.key, r.lo) < 0 {
			r.lo = bytes.Clone(e.key)
		}
		if r.hi != nil && bytes.Compare(e.key, r.hi) >= 0 {
			r.hi = append(bytes.Clone(e.key), 0) // the key right after it
		}
	}
	return r
}

// rangeOfBranch is r grown to hold the keys under a branch of keys: from
// its first, and, when its last lies past r, with no end (what its last
// child holds goes up to a key no sound page names).
func rangeOfBranch(r keyRange, keys [][]byte) keyRange {
	if r.lo != nil && bytes.Compare(keys[0], r.lo) < 0 {
		r.lo = bytes.Clone(keys[0])
	}
	if r.hi != nil && bytes.Compare(keys[len(keys)-1], r.hi) >= 0 {
		r.hi = nil
	}
	return r
}

// sound notes node id, of span pages under r, as read.
func (w *treeWalk) sound(id, span uint64, r keyRange) {
	w.tree.add(id, span)
	if !w.keysOnly {
		w.under[id] = r
	}
}

// leaf takes the values of a sound leaf page (or a bucket's inline
// page) of bucket name; of the root bucket, it walks each bucket.
func (w *treeWalk) leaf(name []byte, id uint64, elems []leafElem) {
	for _, e := range elems {
		if name != nil && e.flags&bucketElement != 0 {
			// Its flags are damaged: it is read as the value it is, which
			// its seal says is whole or not.
			w.notes = append(w.notes, fmt.Sprintf("page %d: bucket %s holds a bucket %q, which this journal never makes: read as a value", id, name, e.key))
		}
		switch {
		case name == nil && e.flags&bucketElement == 0:
			w.notes = append(w.notes, fmt.Sprintf("page %d: a value %q outside any bucket", id, e.key))
		case name == nil:
			w.subBucket(id, e)
		case w.keysOnly:
		case !store.Sealed(name, e.key):
			w.vals = append(w.vals, pageValue{name, e.key, e.val, id})
		default:
			if v, ok := unseal(name, e.key, e.val); ok {
				w.vals = append(w.vals, pageValue{name, e.key, v, id})
			} else if bytes.Equal(name, store.BucketDamaged) {
				w.vals = append(w.vals, pageValue{name, e.key, e.val, id}) // what a quarantine of old wrote without a seal, as boltValues
			} else {
				w.bad = append(w.bad, fmt.Sprintf("%s/%q: its checksum fails (page %d)", name, e.key, id))
			}
		}
	}
}

// subBucket walks the bucket whose element in the root bucket (on page
// id) is e.
func (w *treeWalk) subBucket(id uint64, e leafElem) {
	name := bytes.Clone(e.key)
	if len(e.val) < bucketHeader {
		w.damaged(keyRange{bucket: name}, id, "the bucket's header is cut short")
		return
	}
	root := binary.LittleEndian.Uint64(e.val)
	if root != 0 {
		w.bucket(name, root, keyRange{bucket: name})
		return
	}
	inline := e.val[bucketHeader:]
	elems, ok, short := leafLayout(inline, len(inline))
	if ok && !short && headOf(inline).flags == leafFlag && inOrder(keysOf(elems), keyRange{}) {
		w.leaf(name, id, elems)
		return
	}
	// The page is in use, and what it holds inline is the bucket's: its
	// values are read from the layout (salvage_leaf.go).
	w.notes = append(w.notes, fmt.Sprintf("page %d: bucket %s, kept inline, is not laid out as bbolt lays it", id, name))
	if w.keysOnly {
		return
	}
	found, unread := scanLeaf(inline, keyRange{bucket: name})
	for _, v := range found {
		v.page = id
		w.vals = append(w.vals, v)
	}
	for _, u := range unread {
		w.bad = append(w.bad, fmt.Sprintf("page %d: bucket %s (inline): %s", id, name, u))
	}
}

// elemsInOrder is inOrder of the elements' keys.
func elemsInOrder(elems []leafElem, r keyRange) bool {
	for i, e := range elems {
		if i > 0 && bytes.Compare(elems[i-1].key, e.key) >= 0 || r.lo != nil && bytes.Compare(e.key, r.lo) < 0 || r.hi != nil && bytes.Compare(e.key, r.hi) >= 0 {
			return false
		}
	}
	return true
}

// inOrder says whether keys rise, and lie in r.
func inOrder(keys [][]byte, r keyRange) bool {
	for i, k := range keys {
		if i > 0 && bytes.Compare(keys[i-1], k) >= 0 || r.lo != nil && bytes.Compare(k, r.lo) < 0 || r.hi != nil && bytes.Compare(k, r.hi) >= 0 {
			return false
		}
	}
	return true
}

// branchLayout reads the keys and children of a branch page of size
// bytes, of which b holds the first len(b), if they are laid out as bbolt
// lays them; short: a key lies past b.
func branchLayout(b []byte, size int) (keys [][]byte, kids []uint64, ok, short bool) {
	n := int(binary.LittleEndian.Uint16(b[10:]))
	at := pageHeader + n*elementSize
	if n == 0 || at > len(b) {
		return nil, nil, false, false
	}
	for i := range n {
		e := b[pageHeader+i*elementSize:]
		pos, ksize := int(binary.LittleEndian.Uint32(e)), int(binary.LittleEndian.Uint32(e[4:]))
		start := pageHeader + i*elementSize + pos
		switch {
		case start != at || ksize == 0 || ksize > size-start:
			return nil, nil, false, false
		case start+ksize > len(b):
			return nil, nil, true, true
		}
		keys = append(keys, b[start:start+ksize])
		kids = append(kids, binary.LittleEndian.Uint64(e[8:]))
		at = start + ksize
	}
	return keys, kids, true, false
}

// leafElem is one element of a leaf page.
type leafElem struct {
	flags    uint32
	key, val []byte
}

func keysOf(elems []leafElem) [][]byte {
	keys := make([][]byte, len(elems))
	for i, e := range elems {
		keys[i] = e.key
	}
	return keys
}

// leafLayout reads the elements of a leaf page of size bytes, of which b
// holds the first len(b), if they are laid out exactly as bbolt lays
// them: each key and value right after the one before. A value past b
// is left out (nil); short: a key or a value lies past b.
func leafLayout(b []byte, size int) (elems []leafElem, ok, short bool) {
	return leafLayoutInto(nil, b, size)
}

// leafLayoutInto is leafLayout appending the elements to elems[:0].
func leafLayoutInto(elems []leafElem, b []byte, size int) (_ []leafElem, ok, short bool) {
	if len(b) < pageHeader {
		return nil, false, false
	}
	n := int(binary.LittleEndian.Uint16(b[10:]))
	at := pageHeader + n*elementSize
	if at > len(b) {
		return nil, false, false
	}
	elems = elems[:0]
	for i := range n {
		e := b[pageHeader+i*elementSize:]
		start := pageHeader + i*elementSize + int(binary.LittleEndian.Uint32(e[4:]))
		ksize, vsize := int(binary.LittleEndian.Uint32(e[8:])), int(binary.LittleEndian.Uint32(e[12:]))
		if start != at || ksize == 0 || ksize > size-start || vsize > size-start-ksize {
			return nil, false, false
		}
		end := start + ksize + vsize
		if end > len(b) {
			short = true
			if start+ksize > len(b) {
				return nil, true, true
			}
		}
		el := leafElem{flags: binary.LittleEndian.Uint32(e), key: b[start : start+ksize]}
		if end <= len(b) {
			el.val = b[start+ksize : end]
		}
		elems = append(elems, el)
		at = end
	}
	return elems, true, short
}

// freelistOf reads the freelist page id: the pages it names, and how
// many pages it takes itself.
func freelistOf(pf *pageFile, id, hwm uint64) (free map[uint64]bool, span uint64, err error) {
	if id == noFreelist {
		return nil, 0, errors.New("the file has none written")
	}
	b, err := pf.pages(id, 1)
	if err != nil {
		return nil, 0, err
	}
	h := headOf(b)
	switch {
	case h.id != id:
		return nil, 0, fmt.Errorf("its header names page %d", h.id)
	case h.flags != freelistFlag:
		return nil, 0, fmt.Errorf("its header does not say freelist (flags %#x)", h.flags)
	case uint64(h.overflow) >= hwm-id:
		return nil, 0, fmt.Errorf("its header says it takes %d more pages, past the file's", h.overflow)
	}
	span = uint64(h.overflow) + 1
	if b, err = pf.pages(id, span); err != nil {
		return nil, span, err
	}
	n, first := uint64(h.count), pageHeader
	if h.count == 0xFFFF {
		if len(b) < pageHeader+8 {
			return nil, span, errors.New("it is cut short")
		}
		n, first = binary.LittleEndian.Uint64(b[pageHeader:]), pageHeader+8
	}
	if n > maxFreelistIDs || uint64(len(b)-first)/8 < n {
		return nil, span, fmt.Errorf("it says it holds %d pages, more than it can", n)
	}
	free = make(map[uint64]bool, n)
	var last uint64
	for i := range n {
		p := binary.LittleEndian.Uint64(b[first+int(i)*8:])
		if p < firstDataPage || p >= hwm || p <= last && i > 0 {
			return nil, span, fmt.Errorf("its id %d, %d, is out of order or not the file's", i, p)
		}
		free[p], last = true, p
	}
	return free, span, nil
}

// fileTree is a bbolt file's current meta, its tree and its freelist,
// as a walk found them.
type fileTree struct {
	pf       *pageFile
	cur      *boltMeta // nil: no meta page is valid
	w        *treeWalk
	free     pageSet // the freelist's pages; nil: it cannot be trusted
	freeWhy  string  // why not
	freeSpan uint64  // the pages the freelist takes itself
	metas    []string
}

// walkFile walks the bbolt file f from its current meta page: its tree
// (keysOnly: its structure only, no value read) and its freelist.
func walkFile(f *os.File, keysOnly bool) (*fileTree, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ps, cur, problems := readMetas(f, fi.Size())
	ft := &fileTree{pf: &pageFile{f: f, size: fi.Size(), ps: ps}, cur: cur, metas: problems}
	pages := uint64(fi.Size() / ps)
	if cur == nil {
		ft.w = newTreeWalk(ft.pf, pages, keysOnly)
		ft.w.lost = append(ft.w.lost, keyRange{})
		ft.freeWhy = "no meta page is valid, to say where the freelist is"
		return ft, nil
	}
	ft.w = newTreeWalk(ft.pf, cur.hwm, keysOnly)
	if pages < cur.hwm {
		ft.w.notes = append(ft.w.notes, fmt.Sprintf("the file ends at page %d, its meta says it has %d", pages, cur.hwm))
	}
	ft.w.bucket(nil, cur.root, keyRange{})
	free, span, err := freelistOf(ft.pf, cur.freelist, cur.hwm)
	ft.freeSpan = span
	if err != nil {
		ft.freeWhy = fmt.Sprintf("the freelist (page %d): %v", cur.freelist, err)
		return ft, nil
	}
	// A page both in the tree and free: the freelist is damaged, or the
	// branch that names the page is (and the page an older copy of what
	// it should name). Neither is trusted: the page's keys are looked for
	// outside the tree too, the newest copy kept.
	var both []uint64
	for p := range free {
		if ft.w.tree.has(p) {
			both = append(both, p)
			if r, ok := ft.w.under[p]; ok {
				ft.w.lost = append(ft.w.lost, r)
			}
		}
	}
	if len(both) > 0 {
		slices.Sort(both)
		ft.freeWhy = fmt.Sprintf("the freelist (page %d) names pages the tree holds: %v", cur.freelist, both[:min(5, len(both))])
		return ft, nil
	}
	ft.free = newPageSet(cur.hwm)
	for p := range free {
		ft.free.add(p, 1)
	}
	return ft, nil
}

// pageCheck walks the structure of the bbolt file at path, page by page,
// reading no value: what is wrong with its pages that bbolt would trip
// on (a key or a page out of place, a freelist that does not fit), none
// of it read through bbolt's mapping. A meta page that fails its
// checksum is not counted while the other is valid: bbolt reads the
// other, as it does after a power cut in the middle of writing one.
func pageCheck(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	ft, err := walkFile(f, true)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	if ft.cur == nil {
		problems = append(problems, ft.metas...)
	}
	problems = append(problems, ft.w.notes...)
	if ft.free == nil && ft.cur != nil && ft.cur.freelist != noFreelist {
		problems = append(problems, ft.freeWhy)
	}
	return problems
}

// pageSalvage is what Salvage took off the file's pages itself.
type pageSalvage struct {
	vals   []pageValue
	lost   []string // values and stretches of pages not kept
	notes  []string // what is wrong with the file
	schema []byte   // meta/schema, if read
}

// readPages reads every live value of the bbolt file at path it can,
// page by page (see above).
func readPages(path string) (pageSalvage, error) {
	var out pageSalvage
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	ft, err := walkFile(f, false)
	if err != nil {
		return out, err
	}
	w, pf := ft.w, ft.pf
	out.notes = append(out.notes, ft.metas...)
	out.notes = append(out.notes, w.notes...)
	out.lost = append(out.lost, w.bad...)
	if ft.free == nil {
		out.notes = append(out.notes, ft.freeWhy)
	}
	if len(w.lost) == 0 {
		out.vals = w.vals
		out.schema = valueOf(w.vals, store.BucketMeta, store.SchemaKey)
		return out, nil
	}

	// The damaged parts' keys, from the pages outside the tree.
	var outside []uint64
	for p := uint64(firstDataPage); p < min(w.hwm, uint64(pf.size/pf.ps)); p++ {
		switch {
		case w.tree.has(p), ft.free.has(p), ft.cur != nil && p >= ft.cur.freelist && p-ft.cur.freelist < ft.freeSpan:
		default:
			outside = append(outside, p)
		}
	}
	have := map[string]bool{}
	for _, v := range w.vals {
		have[string(v.bucket)+"\x00"+string(v.key)] = true
	}
	under := func(bucket, key []byte) bool {
		return slices.ContainsFunc(w.lost, func(r keyRange) bool { return r.holds(bucket, key) })
	}
	found := map[string]pageValue{}
	var older int // keys of which more than one copy was found
	for i := 0; i < len(outside); i++ {
		p := outside[i]
		b, err := pf.pages(p, 1)
		if err != nil {
			out.lost = append(out.lost, err.Error())
			continue
		}
		h := headOf(b)
		within, named := w.damagedAt[p]
		if !named && (h.id != p || h.flags != leafFlag) {
			// Not a leaf: a branch (its keys are its children's), a page a
			// large value takes, a page never used. A leaf whose header is
			// damaged is read when the tree names it.
			continue
		}
		if named && h.id == p && h.flags == branchFlag {
			if _, _, ok, _ := branchLayout(b, int(pf.ps)); ok {
				// A branch laid out whole, named under keys it does not
				// hold: its values are on its children, outside the tree
				// with it.
				continue
			}
		}
		// A leaf that takes more pages than one says so in its header, or
		// its elements' sizes do: the pages after it are read with it.
		span := ft.leafSpan(h, p)
		if span > 1 {
			if b, err = pf.pages(p, span); err != nil {
				out.lost = append(out.lost, err.Error())
				continue
			}
		}
		vals, unread := scanLeaf(b, within)
		took := false
		for _, v := range vals {
			k := string(v.bucket) + "\x00" + string(v.key)
			if have[k] || !under(v.bucket, v.key) {
				continue
			}
			took = true
			v.page = p
			if prev, ok := found[k]; ok {
				older++
				if !newer(v, prev) {
					continue
				}
			}
			found[k] = v
		}
		if took || ft.free != nil {
			for _, u := range unread {
				out.lost = append(out.lost, fmt.Sprintf("page %d (outside the tree): %s", p, u))
			}
		}
		// Skip the pages it takes, unless one of them is where another
		// page begins (its header names it): a damaged size.
		for span > 1 && i+1 < len(outside) && outside[i+1] < p+span && !namesItself(pf, outside[i+1]) {
			i++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(found)) {
		w.vals = append(w.vals, found[k])
	}
	out.vals = w.vals
	out.schema = valueOf(w.vals, store.BucketMeta, store.SchemaKey)
	for _, r := range w.lost {
		out.notes = append(out.notes, fmt.Sprintf("%s: under a damaged page; looked for on the %d pages outside the tree", r, len(outside)))
	}
	if ft.free == nil && len(found) > 0 {
		out.notes = append(out.notes, fmt.Sprintf("%d values were taken from pages outside the tree while the freelist could not be trusted: a page bbolt had freed (an older copy: a job since completed) cannot be told from a live one, so a job completed before the last checkpoint may come back and run again (at-least-once); %d keys were found more than once, the newest copy kept", len(found), older))
	}
	return out, nil
}

// namesItself says whether page id's header names it.
func namesItself(pf *pageFile, id uint64) bool {
	b, err := pf.pages(id, 1)
	return err == nil && headOf(b).id == id
}

// leafSpan is how many pages the leaf at p takes: its header's
// overflow, when its header is whole (it names the page, as a leaf's);
// else the pages after it up to one that the tree holds, or is free, or
// names itself in its header (the pages a large value takes hold its
// bytes, no header), at most maxGuess.
func (ft *fileTree) leafSpan(h pageHead, p uint64) uint64 {
	if h.id == p && h.flags == leafFlag && uint64(h.overflow) < ft.w.hwm-p {
		return uint64(h.overflow) + 1
	}
	n := uint64(1)
	for ; n < maxGuess && p+n < ft.w.hwm; n++ {
		if q := p + n; ft.w.tree.has(q) || ft.free.has(q) || namesItself(ft.pf, q) {
			break
		}
	}
	return n
}

// maxGuess bounds the pages a leaf whose header is damaged is read with
// (1 MiB of pages of 4 KiB): a larger value on it is lost, named.
const maxGuess = 256

// valueOf is the value of bucket's key among vals, nil if none.
func valueOf(vals []pageValue, bucket, key []byte) []byte {
	for _, v := range vals {
		if bytes.Equal(v.bucket, bucket) && bytes.Equal(v.key, key) {
			return v.val
		}
	}
	return nil
}

// newer says whether a is a later copy of a key than b: a job record by
// its trail and attempts (each change of a job adds to them), the job
// sequence and the checkpoint by their number (they only grow); of other
// values, the first found stays.
func newer(a, b pageValue) bool {
	switch {
	case bytes.Equal(a.bucket, store.BucketJobs):
		ja, erra := store.DecodeJob(a.key, a.val)
		jb, errb := store.DecodeJob(b.key, b.val)
		if erra != nil || errb != nil {
			return errb != nil && erra == nil
		}
		ta, tb := lastEvent(ja), lastEvent(jb)
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		if ja.Attempts != jb.Attempts {
			return ja.Attempts > jb.Attempts
		}
		return len(ja.Trail) > len(jb.Trail)
	case bytes.Equal(a.bucket, store.BucketMeta) && len(a.val) >= 8 && len(b.val) >= 8:
		return binary.BigEndian.Uint64(a.val) > binary.BigEndian.Uint64(b.val)
	}
	return false
}

// lastEvent is when a job last changed, as far as its record says.
func lastEvent(j *store.Job) time.Time {
	if len(j.Trail) > 0 {
		return j.Trail[len(j.Trail)-1].Time
	}
	return j.Enqueued
}
