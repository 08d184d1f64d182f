package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// salvageFixture is a journal as a killed broker leaves it, with a
// history: jobs appended and checkpointed, some completed at the next
// checkpoint (their old copies left on pages bbolt freed), more appended;
// then, after the last checkpoint, some completed and more appended in
// the log only.
type salvageFixture struct {
	path string
	live map[string][]byte // every job acknowledged and not completed
	// done: completed before the last checkpoint (old copies on freed
	// pages); doneInLog: completed after it (bbolt holds them, the log
	// deletes them).
	done, doneInLog map[string]bool
	inLog           map[string]bool // appended after the last checkpoint
	// tried: jobs whose attempt was recorded at the second checkpoint
	// (their first record left on freed pages).
	tried map[string]bool
	file  fileMap
}

// fixtureSchedule and the queue's settings live in small buckets, kept
// inline in the root bucket's page.
var (
	fixtureSchedule = &store.Schedule{ID: "nightly", Queue: "q", Payload: []byte("nightly payload"), Every: time.Hour, Left: -1,
		Next: time.Unix(2_000_000_000, 0), Created: time.Unix(1_700_000_000, 0)}
	fixtureSettings = store.QueueSettings{Concurrency: 7}
)

// makeFixture makes the fixture in a folder of t's (each case copies it
// before it damages it).
func makeFixture(t *testing.T) *salvageFixture {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	payload := func(i int) []byte {
		n := 20 + rng.IntN(3000)
		if i%40 == 7 {
			n = 9000 + rng.IntN(9000) // a value over pages of its own
		}
		p := make([]byte, n)
		for k := range p {
			p[k] = 'a' + byte(rng.IntN(26))
		}
		return append(fmt.Appendf(nil, "job %d ", i), p...)
	}
	id := func(i int) string { return fmt.Sprintf("job-%04d", i) }
	fx := &salvageFixture{path: filepath.Join(dir, "live", "journal.db"), live: map[string][]byte{},
		done: map[string]bool{}, doneInLog: map[string]bool{}, inLog: map[string]bool{}, tried: map[string]bool{}}
	add := func(from, to int) map[string][]byte {
		jobs := map[string][]byte{}
		for i := from; i < to; i++ {
			jobs[id(i)] = payload(i)
			fx.live[id(i)] = jobs[id(i)]
		}
		return jobs
	}
	complete := func(from, to int, into map[string]bool) []string {
		var ids []string
		for i := from; i < to; i++ {
			ids = append(ids, id(i))
			into[id(i)] = true
			delete(fx.live, id(i))
		}
		return ids
	}
	intoFile(t, fx.path, func(j *boltstore.Journal) { appendAll(t, j, add(0, 300)) })
	intoFile(t, fx.path, func(j *boltstore.Journal) {
		completeAll(t, j, complete(0, 80, fx.done))
		appendAll(t, j, add(300, 360))
		for i := 100; i < 120; i++ {
			errs := make(chan error, 1)
			j.RecordAttempt(id(i), "worker lost", time.Time{}, []store.TrailEvent{{Time: time.Now(), Kind: "failed", Attempt: 1}}, func(_ *store.Job, err error) { errs <- err })
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			fx.tried[id(i)] = true
		}
		errs := make(chan error, 2)
		j.PutSchedule(fixtureSchedule, func(_ bool, err error) { errs <- err })
		j.PutQueueSettings("q", fixtureSettings, func(err error) { errs <- err })
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
	j := openWith(t, fx.path, smallSegments(t))
	completeAll(t, j, complete(80, 100, fx.doneInLog))
	inLog := add(360, 380)
	appendAll(t, j, inLog)
	for k := range inLog {
		fx.inLog[k] = true
	}
	killed := filepath.Join(dir, "killed", "journal.db")
	snapshot(t, fx.path, killed)
	closeOK(t, j)
	fx.path = killed
	fx.file = mapFile(t, killed)
	return fx
}

// fileMap is where things are in a sound bbolt file, as bbolt itself
// reads it.
type fileMap struct {
	pageSize int
	hwm      int
	types    []string // each page's type below the high-water mark (bbolt's: meta, freelist, branch, leaf, free)
	overflow []int
	root     int // the root bucket's page
	freelist int
	txid     uint64
	jobsRoot int
	jobAt    map[string][2]int64 // where a job's key and value lie, from, to
	// where the fixture's schedule and its queue's settings lie, in a
	// page of the tree ("schedules/nightly", "queues/q")
	valueAt map[string][2]int64
}

// jobsLeaves are the leaf pages holding jobs, with the jobs each holds.
func (m fileMap) jobsLeaves() map[int][]string {
	leaves := map[int][]string{}
	for id := range m.jobAt {
		p := m.nodeOf(id)
		leaves[p] = append(leaves[p], id)
	}
	return leaves
}

// nodeOf is the page of the leaf that holds job id: where its key lies,
// or, when that is one of the pages after a leaf's first, that first.
func (m fileMap) nodeOf(id string) int {
	p := int(m.jobAt[id][0]) / m.pageSize
	for strings.HasPrefix(m.types[p], "page of the") {
		p--
	}
	return p
}

// mapFile reads where everything is in the sound journal file at path,
// with bbolt (on a copy: bbolt lists pages' types only opened for
// writing).
func mapFile(t *testing.T, path string) fileMap {
	cp := filepath.Join(t.TempDir(), "map.db")
	copyFileTo(t, path, cp)
	db, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := fileMap{pageSize: db.Info().PageSize, jobAt: map[string][2]int64{}, valueAt: map[string][2]int64{}}
	raw, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 2 { // the current meta: valid magic, the higher txid
		meta := raw[p*m.pageSize+16:]
		if binary.LittleEndian.Uint32(meta) == 0xED0CDAED && binary.LittleEndian.Uint64(meta[48:]) >= m.txid {
			m.root, m.freelist = int(binary.LittleEndian.Uint64(meta[16:])), int(binary.LittleEndian.Uint64(meta[32:]))
			m.hwm, m.txid = int(binary.LittleEndian.Uint64(meta[40:])), binary.LittleEndian.Uint64(meta[48:])
		}
	}
	err = db.View(func(tx *bolt.Tx) error {
		for id := 0; id < m.hwm; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return fmt.Errorf("page %d: %v", id, err)
			}
			m.types, m.overflow = append(m.types, info.Type), append(m.overflow, info.OverflowCount)
		}
		for _, bk := range [][2]string{{"schedules", "nightly"}, {"queues", "q"}} {
			b := tx.Bucket([]byte(bk[0]))
			if b == nil || b.Get([]byte(bk[1])) == nil {
				continue
			}
			// Kept inline, it may be copied out of the mapping: looked for
			// in the tree's leaves.
			kv := append([]byte(bk[1]), b.Get([]byte(bk[1]))...)
			for p := range m.types {
				if m.types[p] != "leaf" {
					continue
				}
				if i := bytes.Index(raw[p*m.pageSize:(p+1)*m.pageSize], kv); i >= 0 {
					at := int64(p*m.pageSize + i)
					m.valueAt[bk[0]+"/"+bk[1]] = [2]int64{at, at + int64(len(kv))}
					break
				}
			}
		}
		jobs := tx.Bucket(store.BucketJobs)
		m.jobsRoot = int(jobs.Root())
		base := db.Info().Data
		return jobs.ForEach(func(k, v []byte) error {
			at := int64(uintptr(unsafe.Pointer(&k[0])) - base)
			m.jobAt[string(k)] = [2]int64{at, at + int64(len(k)+len(v))}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m.hwm; i++ { // overflow pages are of the page before
		if m.overflow[i] > 0 {
			for k := 1; k <= m.overflow[i]; k++ {
				m.types[i+k] = "page of the " + m.types[i] + " before"
			}
			i += m.overflow[i]
		}
	}
	return m
}

// copyFixture copies the fixture's journal into a folder of the test's.
func copyFixture(t *testing.T, fx *salvageFixture) string {
	path := filepath.Join(t.TempDir(), "journal.db")
	snapshot(t, fx.path, path)
	return path
}

// overwrite writes junk at off of the file at path.
func overwrite(t testing.TB, path string, off int64, junk []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func junk(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// salvaged salvages the journal at path into a new folder, and says what
// the new journal holds: each pending job's payload.
func salvaged(t *testing.T, path string) (boltstore.SalvageReport, map[string][]byte) {
	rep, held, _ := salvagedJournal(t, path)
	return rep, held
}

// salvagedJournal is salvaged, with what else the new journal holds:
// each job's attempts, the schedules, the queues' settings.
func salvagedJournal(t *testing.T, path string) (boltstore.SalvageReport, map[string][]byte, heldElse) {
	t.Helper()
	to := filepath.Join(t.TempDir(), "salvaged", "journal.db")
	rep, err := boltstore.Salvage(path, to)
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	if crep, err := boltstore.Check(to); err != nil || !crep.OK() {
		t.Fatalf("check of the salvaged journal: %+v, %v", crep, err)
	}
	j := openWith(t, to, smallSegments(t))
	defer closeOK(t, j)
	held := map[string][]byte{}
	var ids []string
	other := heldElse{attempts: map[string]int{}}
	if err := j.Load(func(jb *store.Job) error {
		ids = append(ids, jb.MsgID)
		other.attempts[jb.MsgID] = jb.Attempts
		return nil
	}); err != nil {
		t.Fatalf("load of the salvaged journal: %v", err)
	}
	if err := j.LoadSchedules(func(s *store.Schedule) error { other.schedules = append(other.schedules, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if other.settings, err = j.QueueSettings(); err != nil {
		t.Fatal(err)
	}
	err = j.Payloads(ids, func(i int, p []byte, err error) {
		if err != nil {
			t.Errorf("salvaged job %s: %v", ids[i], err)
		}
		held[ids[i]] = p
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep, held, other
}

type heldElse struct {
	attempts  map[string]int
	schedules []*store.Schedule
	settings  map[string]store.QueueSettings
}

// assertSalvaged checks what Salvage kept of the fixture with the bytes
// from, to of its file damaged: every live job whose key and value do
// not meet the damage, with its own payload; every other live job named
// in Lost (by msgid, or by the page it was on); no job completed before
// the last checkpoint, unless the report says the freelist could not be
// read (then one may come back, to run again); never one completed in
// the log.
func assertSalvaged(t *testing.T, fx *salvageFixture, from, to int64, rep boltstore.SalvageReport, held map[string][]byte, other heldElse) (lost int) {
	t.Helper()
	meets := func(id string) bool {
		at, ok := fx.file.jobAt[id]
		return ok && at[0] < to && from < at[1]
	}
	lostText := strings.Join(rep.Lost, "\n")
	// The schedule and the queue's settings, unless the damage met them
	// (then named).
	for key, kept := range map[string]bool{
		"schedules/nightly": len(other.schedules) == 1 && other.schedules[0].ID == fixtureSchedule.ID && bytes.Equal(other.schedules[0].Payload, fixtureSchedule.Payload),
		"queues/q":          other.settings["q"] == fixtureSettings,
	} {
		at, ok := fx.file.valueAt[key]
		if !ok {
			t.Fatalf("the fixture's %s is nowhere in the file", key)
		}
		if !kept && (to <= at[0] || at[1] <= from) {
			t.Errorf("%s lost, though it is whole (at %v; damage %d to %d)", key, at, from, to)
		} else if !kept && !regexp.MustCompile(fmt.Sprintf(`page %d\b`, at[0]/int64(fx.file.pageSize))).MatchString(lostText) && !strings.Contains(lostText, strings.Split(key, "/")[1]) {
			t.Errorf("%s lost without being named; lost: %q", key, rep.Lost)
		}
	}
	for id, want := range fx.live {
		got, ok := held[id]
		switch {
		case ok && !bytes.Equal(got, want):
			t.Errorf("job %s salvaged with a payload of %d bytes, not its own %d", id, len(got), len(want))
		case ok && fx.tried[id] && other.attempts[id] != 1:
			t.Errorf("job %s salvaged with %d attempts: an older record than its last, of 1", id, other.attempts[id])
		case ok:
		case fx.inLog[id] || !meets(id):
			t.Errorf("job %s lost, though its value is whole (at %v; damage %d to %d)", id, fx.file.jobAt[id], from, to)
		case !strings.Contains(lostText, strconv.Quote(id)) && !regexp.MustCompile(fmt.Sprintf(`page %d\b`, fx.file.nodeOf(id))).MatchString(lostText):
			t.Errorf("job %s lost without being named (page %d); lost: %q", id, fx.file.nodeOf(id), rep.Lost)
		default:
			lost++
		}
	}
	freelistUnread := strings.Contains(strings.Join(rep.Pages, "\n"), "may come back")
	for id := range held {
		switch {
		case fx.live[id] != nil:
		case fx.done[id] && freelistUnread:
		case fx.done[id]:
			t.Errorf("job %s, completed before the last checkpoint, came back (the freelist was read)", id)
		default:
			t.Errorf("job %s came back: completed in the log", id)
		}
	}
	if t.Failed() {
		t.Logf("damage %d to %d; pages: %q; lost: %q", from, to, rep.Pages, rep.Lost)
	}
	return lost
}

// A journal's bbolt file damaged where bbolt needs it to find anything:
// a leaf's header or its elements' headers, a branch, the root bucket's
// page, the freelist, both meta pages. Salvage keeps every live job
// whose value is whole, names the others, and brings back no job
// completed before the damage while it can read the freelist.
func TestSalvageReadsPagesBboltCannot(t *testing.T) {
	t.Parallel()
	fx := makeFixture(t)
	m := fx.file
	ps := int64(m.pageSize)
	rng := rand.New(rand.NewPCG(3, 4))
	leaves := m.jobsLeaves()
	// Leaves of several jobs, one of them holding a large job (with
	// overflow pages), one without.
	var multi, large int
	for _, p := range slices.Sorted(maps.Keys(leaves)) {
		if m.overflow[p] > 0 && large == 0 {
			large = p
		}
		if len(leaves[p]) >= 3 && m.overflow[p] == 0 && multi == 0 {
			multi = p
		}
	}
	branch := m.jobsRoot
	if m.types[branch] != "branch" {
		t.Fatalf("the jobs bucket's root, page %d, is a %s: the fixture should make it a branch", branch, m.types[branch])
	}
	if multi == 0 || large == 0 {
		t.Fatalf("no leaf of several jobs (%d) or of a large one (%d)", multi, large)
	}
	n := len(leaves[multi])
	t.Logf("root page %d, freelist %d, jobs' branch %d, a leaf of %d jobs %d, of a large one %d; the schedule at %v, the queue's settings at %v",
		m.root, m.freelist, branch, n, multi, large, m.valueAt["schedules/nightly"], m.valueAt["queues/q"])
	key, first := branchKey(t, fx, branch)
	// The schedules bucket is kept inline in the root's page: from its
	// name to its one value's key (its name, its header, its page's
	// header and its element's).
	raw, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	sched := int64(bytes.Index(raw[m.root*int(ps):(m.root+1)*int(ps)], []byte("schedules"))) + int64(m.root)*ps
	if v := m.valueAt["schedules/nightly"]; v[0]/ps != int64(m.root) || sched < int64(m.root)*ps || v[0] <= sched {
		t.Fatalf("the schedule at %v, its bucket's name at %d: want both in the root's page %d", v, sched, m.root)
	}
	victim := leaves[multi][0]                               // a job of that leaf
	payload := (m.jobAt[victim][0] + m.jobAt[victim][1]) / 2 // the middle of its payload
	type place struct {
		at int64
		n  int
	}
	cases := []struct {
		name string
		at   int64
		n    int
		also *place // a second place, holding no job's bytes
		// bump: the byte at is changed by it, not junk
		bump int
		// byBolt: bbolt reads the file all the same.
		byBolt bool
		// freed: the freelist cannot be trusted, so jobs completed before
		// may come back.
		freed bool
	}{
		{name: "a leaf's header", at: int64(multi) * ps, n: 16},
		{name: "a leaf's count", at: int64(multi)*ps + 10, n: 2},
		{name: "a leaf's header and first elements", at: int64(multi)*ps + 4, n: 50},
		{name: "a leaf's headers and its first key", at: int64(multi)*ps + 9, n: 16 + 16*n + 10 - 9},
		{name: "an element's header in the middle", at: int64(multi)*ps + 16 + 16 + 2, n: 12},
		{name: "the last element's header", at: int64(multi)*ps + 16 + int64(n-1)*16, n: 16},
		{name: "the last element's key size, one more", at: int64(multi)*ps + 16 + int64(n-1)*16 + 8, n: 1, bump: 1, byBolt: true},
		{name: "a large job's leaf header", at: int64(large) * ps, n: 40},
		{name: "a job's value, and the branch above it", at: payload, n: 10, also: &place{int64(branch)*ps + 16, 16}},
		{name: "a job's value, and the freelist", at: payload, n: 10, also: &place{int64(m.freelist)*ps + 16, 64}},
		{name: "the jobs bucket's branch", at: int64(branch)*ps + 20, n: 64},
		{name: "the root bucket's page", at: int64(m.root) * ps, n: 64},
		{name: "an inline bucket's name and headers", at: sched, n: int(m.valueAt["schedules/nightly"][0] - sched)},
		{name: "the freelist", at: int64(m.freelist)*ps + 16, n: 64},
		{name: "the freelist's header and a branch", at: int64(m.freelist) * ps, n: 16, also: &place{int64(branch)*ps + 16, 16}, freed: true},
		// bbolt reads the file as of the other meta, the one before: the
		// log holds what the last commit wrote.
		{name: "the newest meta page", at: int64(m.txid%2)*ps + 16 + 16, n: 8, byBolt: true},
		{name: "both meta pages", at: 0, n: int(ps) + 100, freed: true},
		// The bucket flag on a job's element: the job's value is whole.
		{name: "a leaf's first element's flags, saying bucket", at: first*ps + 16, n: 1, bump: 1},
		// A key of the branch that stays in order: one less, the leaf
		// before it holds a key past its range; one more, its own leaf
		// holds its first key before it. Either leaf is whole.
		{name: "a branch's key, one less", at: key, n: 1, bump: -1},
		{name: "a branch's key, one more", at: key, n: 1, bump: 1},
	}
	for _, c := range cases {
		bad := junk(rng, c.n)
		var also []byte
		if c.also != nil {
			also = junk(rng, c.also.n)
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := copyFixture(t, fx)
			if c.bump != 0 {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				bad = []byte{b[c.at] + byte(c.bump)}
			}
			overwrite(t, path, c.at, bad)
			if c.also != nil {
				overwrite(t, path, c.also.at, also)
			}
			rep, held, other := salvagedJournal(t, path)
			if byBolt := len(rep.Pages) == 0; byBolt != c.byBolt {
				t.Errorf("read by bbolt: %v, want %v", byBolt, c.byBolt)
			}
			if pages := strings.Join(rep.Pages, "\n"); !c.freed && strings.Contains(pages, "may come back") {
				t.Errorf("the freelist was not trusted: %q", rep.Pages)
			}
			assertSalvaged(t, fx, c.at, c.at+int64(c.n), rep, held, other)
			t.Logf("%d jobs kept of %d live; pages: %q; lost: %q", len(held), len(fx.live), rep.Pages, rep.Lost)
		})
	}
}

// branchKey finds, in the jobs' branch at page branch, a key whose last
// byte is one more than the last key of the leaf before it, each leaf of
// live jobs, its own of two or more: it returns where that byte is, and
// the leaf's page.
func branchKey(t *testing.T, fx *salvageFixture, branch int) (at int64, leaf int64) {
	t.Helper()
	ps := fx.file.pageSize
	raw, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	b := raw[branch*ps : (branch+1)*ps]
	leaves := fx.file.jobsLeaves()
	live := func(p int) bool {
		return len(leaves[p]) > 0 && !slices.ContainsFunc(leaves[p], func(id string) bool { return fx.live[id] == nil })
	}
	for i := 1; i < int(binary.LittleEndian.Uint16(b[10:])); i++ {
		e, prev := b[16+i*16:], b[16+(i-1)*16:]
		start := 16 + i*16 + int(binary.LittleEndian.Uint32(e))
		k := b[start : start+int(binary.LittleEndian.Uint32(e[4:]))]
		kid, before := int(binary.LittleEndian.Uint64(e[8:])), int(binary.LittleEndian.Uint64(prev[8:]))
		less := append(bytes.Clone(k[:len(k)-1]), k[len(k)-1]-1)
		if live(kid) && live(before) && len(leaves[kid]) >= 2 && slices.Contains(leaves[before], string(less)) {
			return int64(branch*ps + start + len(k) - 1), int64(kid)
		}
	}
	t.Fatalf("no key in the jobs' branch, page %d, one more than the leaf's before", branch)
	return 0, 0
}

// Random damage in the bbolt file of a journal, as a failing disk does
// it: 1–64 random bytes at a random place of what the file holds, and,
// as many times, in the first 128 bytes of a page (its header and its
// elements' headers, where bbolt needs the file whole). Salvage never
// fails; the journal it writes checks OK and holds every live job whose
// value the damage missed, each with its own payload; every other live
// job is named in its report; no job completed before the damage comes
// back unless the report says the freelist could not be trusted. 10
// trials of each; 200 with EMQ_TORTURE; EMQ_TEST_SEED replays a run.
func TestSalvageOfRandomDamage(t *testing.T) {
	t.Parallel()
	fx := makeFixture(t)
	trials := 10
	if os.Getenv("EMQ_TORTURE") != "" {
		trials = 200
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("EMQ_TEST_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (EMQ_TEST_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	raw, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	used, ps := int64(len(bytes.TrimRight(raw, "\x00"))), int64(fx.file.pageSize)
	outcomes := map[string]map[string]int{}
	for trial := range 2 * trials {
		place := "anywhere"
		at, bad := rng.Int64N(used), junk(rng, 1+rng.IntN(64))
		if trial%2 == 1 {
			place = "a page's head"
			at = rng.Int64N(used/ps)*ps + rng.Int64N(128)
		}
		n := len(bad)
		where := fmt.Sprintf("trial %d: %d bytes at offset %d (page %d, a %s)", trial, n, at, at/ps, fx.file.types[at/ps])
		ok := t.Run(fmt.Sprint(trial), func(t *testing.T) {
			path := copyFixture(t, fx)
			overwrite(t, path, at, bad)
			rep, held, other := salvagedJournal(t, path)
			lost := assertSalvaged(t, fx, at, at+int64(n), rep, held, other)
			outcome := "read by bbolt"
			if len(rep.Pages) > 0 {
				outcome = "read page by page"
			}
			switch back := len(held) + lost - len(fx.live); {
			case lost > 0 && back > 0:
				outcome += ", damaged jobs named, completed jobs back"
			case lost > 0:
				outcome += ", damaged jobs named"
			case back > 0:
				outcome += ", completed jobs back (the freelist untrusted)"
			default:
				outcome += ", every job kept"
			}
			if outcomes[place] == nil {
				outcomes[place] = map[string]int{}
			}
			outcomes[place][outcome]++
			t.Logf("%s: %s; %d named lost", where, outcome, lost)
		})
		if !ok {
			t.Fatalf("%s failed (seed %d)", where, seed)
		}
	}
	for _, place := range slices.Sorted(maps.Keys(outcomes)) {
		t.Logf("%d trials, %s: %v", trials, place, outcomes[place])
	}
}

// A leaf element whose key the disk moved past the end of the file:
// bbolt's own check reads the key in a goroutine of its own, where the
// fault of reading past the file's mapping takes the process down.
// emq journal check, and the check a journal runs at open, report the
// page instead, and Salvage keeps every job.
func TestCheckOfAKeyPastTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	jobs := numbered(0, 40)
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	m := mapFile(t, path)
	var page int
	for p, ids := range m.jobsLeaves() {
		if len(ids) >= 2 {
			page = p
			break
		}
	}
	if page == 0 {
		t.Fatal("no leaf of two jobs")
	}
	// The first element's pos (bytes 4 to 8 of its header): 256 MiB on,
	// inside bbolt's mapping of 1 GiB, past the file.
	at := int64(page*m.pageSize + 16 + 4)
	overwrite(t, path, at, binary.LittleEndian.AppendUint32(nil, 256<<20))
	named := fmt.Sprintf("page %d ", page)

	rep, err := boltstore.Check(path)
	if err != nil || rep.OK() || !strings.Contains(strings.Join(rep.Structure, "\n"), named) {
		t.Fatalf("check: %v, %q; want the structure's problem named at %s", err, rep.Structure, named)
	}

	opts := smallSegments(t)
	damaged := make(chan store.Damage, 1)
	opts.OnDamage = func(d store.Damage) { damaged <- d }
	j := openWith(t, path, opts)
	select {
	case d := <-damaged:
		if !strings.Contains(d.Reason, named) {
			t.Errorf("the check at open: %s; want %s named", d.Reason, named)
		}
	case <-time.After(30 * time.Second):
		t.Error("the check at open found nothing within 30 s")
	}
	j.Close()

	// The key and value are whole: the element is read from the layout.
	srep, held := salvaged(t, path)
	if len(held) != len(jobs) || len(srep.Lost) != 0 {
		t.Fatalf("salvage kept %d jobs of %d, lost %q; want every one", len(held), len(jobs), srep.Lost)
	}
}

// A key of a branch above branches, changed by the damage and still in
// order with its neighbours: the branch under it, or the one before, then
// holds keys outside the range it names. Both are whole: Salvage keeps
// every job under them.
func TestSalvageOfABranchKeyInOrder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	jobs := map[string][]byte{}
	for i := range 300 { // long msgids: few keys a branch, three levels
		jobs[fmt.Sprintf("job-%0196d", i)] = bytes.Repeat([]byte{'a' + byte(i%26)}, 1000)
	}
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	m := mapFile(t, path)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// branch is the keys and children of the branch at page p, and where
	// each key is.
	branch := func(p int) (keys [][]byte, kids []int, at []int64) {
		b := raw[p*m.pageSize : (p+1)*m.pageSize]
		for i := range int(binary.LittleEndian.Uint16(b[10:])) {
			e := b[16+i*16:]
			start := 16 + i*16 + int(binary.LittleEndian.Uint32(e))
			keys = append(keys, b[start:start+int(binary.LittleEndian.Uint32(e[4:]))])
			kids = append(kids, int(binary.LittleEndian.Uint64(e[8:])))
			at = append(at, int64(p*m.pageSize+start))
		}
		return keys, kids, at
	}
	keys, kids, at := branch(m.jobsRoot)
	if m.types[m.jobsRoot] != "branch" || len(kids) < 3 || m.types[kids[0]] != "branch" {
		t.Fatalf("the jobs' root, page %d, is a %s of %d children: want a branch of 3 or more branches", m.jobsRoot, m.types[m.jobsRoot], len(kids))
	}
	before, _, _ := branch(kids[0])
	if len(before) < 2 {
		t.Fatalf("the first branch under the root, page %d, has %d keys", kids[0], len(before))
	}
	one := append(bytes.Clone(keys[1][:len(keys[1])-1]), keys[1][len(keys[1])-1]+1)
	for _, c := range []struct {
		name string
		key  []byte
	}{
		{"one more: the branch under it starts before it", one},
		{"the last key of the branch before: that branch ends past it", before[len(before)-1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := filepath.Join(t.TempDir(), "journal.db")
			snapshot(t, path, cp)
			overwrite(t, cp, at[1], c.key)
			rep, held := salvaged(t, cp)
			if len(rep.Pages) == 0 {
				t.Error("read by bbolt; want page by page")
			}
			for id, want := range jobs {
				if !bytes.Equal(held[id], want) {
					t.Errorf("job %s: %d bytes kept, want its %d", id[len(id)-4:], len(held[id]), len(want))
				}
			}
			if len(rep.Lost) != 0 {
				t.Errorf("lost: %q", rep.Lost)
			}
			if t.Failed() {
				t.Logf("pages: %q", rep.Pages)
			}
		})
	}
}

// The root bucket's page with its count of buckets damaged (one, of
// eighteen): bbolt then finds no meta bucket, so no schema version, and
// would take the file for one from before the checksums. emq journal
// check names the page instead, and Salvage keeps every job.
func TestDamagedBucketsAreNotAnOlderFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	jobs := numbered(0, 40)
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	m := mapFile(t, path)
	overwrite(t, path, int64(m.root*m.pageSize+10), binary.LittleEndian.AppendUint16(nil, 1))
	named := fmt.Sprintf("page %d ", m.root)

	rep, err := boltstore.Check(path)
	structure := strings.Join(rep.Structure, "\n")
	if err != nil || rep.OK() || !strings.Contains(structure, named) || strings.Contains(structure, "older") || strings.Contains(structure, "version") {
		t.Fatalf("check: %v, %q; want %s named, not an older file", err, rep.Structure, named)
	}
	srep, held := salvaged(t, path)
	if len(held) != len(jobs) || len(srep.Lost) != 0 {
		t.Fatalf("salvage kept %d jobs of %d, lost %q; want every one", len(held), len(jobs), srep.Lost)
	}
}

// The same damage met by a broker's open: the file would pass for an
// older one and be migrated, new empty buckets written over the root
// page, every job gone from it. Open refuses it, naming the page, and
// leaves the file as it was.
func TestOpenRefusesAFileWhoseBucketsAreDamaged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	// More than a segment of the log: the first is gone after the
	// checkpoint, its jobs in the file only.
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, numbered(0, 400)) })
	m := mapFile(t, path)
	overwrite(t, path, int64(m.root*m.pageSize+10), binary.LittleEndian.AppendUint16(nil, 1))
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := boltstore.Open(path, smallSegments(t))
	if err == nil {
		var n int
		j.Load(func(*store.Job) error { n++; return nil })
		j.Close()
		after, _ := os.ReadFile(path)
		t.Fatalf("open of a file whose root page is damaged served %d jobs of 400; the file changed: %v", n, !bytes.Equal(after, before))
	}
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("page %d ", m.root)) {
		t.Errorf("open: %v; want ErrCorrupt naming page %d", err, m.root)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("the refused open changed the file")
	}
}
