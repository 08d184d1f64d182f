// Command benchtable writes the tables of docs/benchmarks.md from one
// make bench session: the peers' per-run lines from ../shared/anchors/run.sh
// (its work directory) and EMQ's runs (emq bench --json, one a line).
//
//	go run ./internal/benchtable -anchors WORKDIR [-rounds DIR] -emq RUNS [-commit C] [-date D]
//
// RUNS has one run a line: KIND<TAB>LABEL<TAB>JSON, where KIND is
// ack (--ack-only, window 1), w1 (window 1, waits for REPLY), w32
// (window 32), pubsub (emq bench --pubsub), round (--ack-only at 1:1 in
// round LABEL, beside DIR/roundLABEL, a run.sh work directory of the
// same round), alone (EMQ's own table, LABEL is its row), or etcd-ack
// and etcd-w32 (a group on a 3-member etcd, scripts/bench-etcd.sh; their
// JSON adds etcd_ops_per_job), beside run.sh's jetstream-r3, or stored
// (LABEL "R empty" or "R full": round R of an empty journal and one with
// jobs preloaded, taken in turn). The peers' lines are those run.sh's load tools
// print for each run: "# LABEL P=.. C=.. run=i/n ... jobs/s=.. put_p99_ms=.. ok".
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// sizes are the producer:consumer shapes of the side-by-side table.
var sizes = []string{"1:1", "4:4", "16:16"}

// peers names the durable systems run.sh measures, in table order.
var peers = []struct{ label, name, durable string }{
	{"beanstalkd-fsync", "beanstalkd -f 0 (fsync every write)", "yes"},
	{"rabbitmq-classic", "RabbitMQ classic, confirms", "yes"},
	{"rabbitmq-quorum", "RabbitMQ quorum (1 node), confirms", "yes"},
	{"asynq-durable", "asynq, Redis appendfsync always", "yes"},
	{"jetstream-sync", "NATS JetStream, sync_interval always", "yes"},
	{"river-sqlite", "River, SQLite WAL synchronous=FULL", "yes"},
	{"beanstalkd-nofsync", "beanstalkd -F (no fsync)", "**no**"},
	{"beanstalkd-memory", "beanstalkd, memory only", "**no**"},
	{"asynq-default", "asynq, Redis appendfsync everysec", "**no**"},
	{"jetstream-default", "NATS JetStream, default sync (2 min)", "**no**"},
}

// replicated names the replicated peers: their own table, beside EMQ on
// etcd, not the single machine's.
var replicated = map[string]string{"jetstream-r3": "NATS JetStream R3 (3 servers), sync always"}

// run is one measured run: a system at one size.
type run struct {
	jobsPerSec float64
	putP99     float64 // ms, put → durable acknowledgement
	failed     bool    // timed out, lost or duplicated jobs: not in the figures
}

type emqRun struct {
	kind, label string
	raw         map[string]any
}

// bad is a run that lost, duplicated or failed jobs.
func (r emqRun) bad() bool {
	return r.num("lost") > 0 || r.num("duplicates") > 0 || r.num("errors") > 0 ||
		(r.kind == "pubsub" && r.num("delivered") != r.num("expected"))
}

func (r emqRun) num(key string) float64 {
	v, _ := r.raw[key].(float64)
	return v
}

func main() {
	anchors := flag.String("anchors", "", "run.sh's work directory (its *.txt and results.txt)")
	emq := flag.String("emq", "", "EMQ's runs, KIND<TAB>LABEL<TAB>JSON a line")
	rounds := flag.String("rounds", "", "the folder of the 1:1 rounds' run.sh work directories, round1, round2, ...")
	commit := flag.String("commit", "", "the EMQ commit measured")
	date := flag.String("date", "", "the day of the session")
	flag.Parse()
	if *emq == "" {
		fmt.Fprintln(os.Stderr, "benchtable: -emq is required")
		os.Exit(2)
	}
	s, err := load(*anchors, *emq)
	if err == nil && *rounds != "" {
		err = s.loadRounds(*rounds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	s.commit, s.date = *commit, *date
	s.write(os.Stdout)
}

// session is everything one make bench measured.
type session struct {
	peerRuns map[string]map[string][]run     // label → size → runs
	pubsub   map[string][]run                // label → each run, deliveries/s as jobsPerSec
	probeUS  float64                         // one 200-byte O_DSYNC write, µs
	cpu      map[string]map[string][]float64 // run.sh's server-cpu lines: label → size → µs a job
	emq      []emqRun
	rounds   map[string]*session // round label → its run.sh work directory's figures
	commit   string
	date     string
}

func load(anchors, emqFile string) (*session, error) {
	s := &session{peerRuns: map[string]map[string][]run{}, pubsub: map[string][]run{}, cpu: map[string]map[string][]float64{}}
	if anchors != "" {
		files, err := filepath.Glob(filepath.Join(anchors, "*.txt"))
		if err != nil {
			return nil, err
		}
		for _, name := range files {
			if err := s.readPeers(name); err != nil {
				return nil, err
			}
		}
	}
	f, err := os.Open(emqFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		parts := strings.SplitN(sc.Text(), "\t", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s:%d: want KIND<TAB>LABEL<TAB>JSON", emqFile, n)
		}
		r := emqRun{kind: parts[0], label: parts[1]}
		if err := json.Unmarshal([]byte(parts[2]), &r.raw); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", emqFile, n, err)
		}
		s.emq = append(s.emq, r)
	}
	return s, sc.Err()
}

// loadRounds reads dir/round*/, each a run.sh work directory.
func (s *session) loadRounds(dir string) error {
	dirs, err := filepath.Glob(filepath.Join(dir, "round*"))
	if err != nil {
		return err
	}
	s.rounds = map[string]*session{}
	for _, d := range dirs {
		r := &session{peerRuns: map[string]map[string][]run{}, pubsub: map[string][]run{}}
		files, err := filepath.Glob(filepath.Join(d, "*.txt"))
		if err != nil {
			return err
		}
		for _, name := range files {
			if err := r.readPeers(name); err != nil {
				return err
			}
		}
		s.rounds[strings.TrimPrefix(filepath.Base(d), "round")] = r
	}
	return nil
}

// readPeers takes the per-run lines of one load tool's output, and the
// disk-probe line of results.txt.
func (s *session) readPeers(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "disk-probe ") {
			s.probeUS = fieldNum(line, "us/write")
			continue
		}
		if rest, ok := strings.CutPrefix(line, "server-cpu "); ok { // SERVER_CPU=1
			label, after, ok := strings.Cut(rest, " P:C=")
			size, _, _ := strings.Cut(after, " ")
			if us := fieldNum(line, "us/job"); ok && us > 0 {
				label, _, _ = strings.Cut(label, " ") // "asynq-durable (redis)": the peer's label
				if s.cpu[label] == nil {
					s.cpu[label] = map[string][]float64{}
				}
				s.cpu[label][size] = append(s.cpu[label][size], us)
			}
			continue
		}
		if !strings.HasPrefix(line, "# ") || !strings.Contains(line, " run=") {
			continue
		}
		failed := !strings.HasSuffix(line, " ok")
		fields := strings.Fields(line[2:])
		if len(fields) < 3 {
			continue
		}
		label := fields[0]
		if strings.Contains(line, " S=") {
			s.pubsub[label] = append(s.pubsub[label], run{jobsPerSec: fieldNum(line, "deliveries/s"), failed: failed})
			continue
		}
		p, c := fieldNum(line, "P"), fieldNum(line, "C")
		if p == 0 || c == 0 {
			continue
		}
		size := fmt.Sprintf("%.0f:%.0f", p, c)
		if s.peerRuns[label] == nil {
			s.peerRuns[label] = map[string][]run{}
		}
		s.peerRuns[label][size] = append(s.peerRuns[label][size],
			run{jobsPerSec: fieldNum(line, "jobs/s"), putP99: fieldNum(line, "put_p99_ms"), failed: failed})
	}
	return sc.Err()
}

// fieldNum is the number after "key=" in a result line, or 0.
func fieldNum(line, key string) float64 {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// emqRuns are EMQ's runs of one kind at one size (and of those labels,
// if any are named), as peer runs.
func (s *session) emqRuns(kind, size string, labels ...string) []run {
	var out []run
	for _, r := range s.emq {
		if r.kind != kind || fmt.Sprintf("%.0f:%.0f", r.num("senders"), r.num("slots")) != size {
			continue
		}
		if len(labels) > 0 && !slices.Contains(labels, r.label) {
			continue
		}
		out = append(out, run{jobsPerSec: r.num("jobs_per_sec"), putP99: r.num("ack_p99_ms"), failed: r.bad()})
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// good are the runs that count.
func good(rs []run) []run {
	return slices.DeleteFunc(slices.Clone(rs), func(r run) bool { return r.failed })
}

// jobsPerSec is the rate of each run that counts.
func jobsPerSec(rs []run) []float64 {
	var out []float64
	for _, r := range good(rs) {
		out = append(out, r.jobsPerSec)
	}
	return out
}

// thousands writes n rounded, with commas: 12,345.
func thousands(n float64) string {
	s := strconv.FormatInt(int64(math.Round(n)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// cellJobs is "median [min–max]" of the rates of the runs that count,
// with how many failed, or "–".
func cellJobs(rs []run) string {
	if len(rs) == 0 {
		return "–"
	}
	v := jobsPerSec(rs)
	var cell string
	switch len(v) {
	case 0:
		cell = "failed"
	case 1:
		cell = thousands(v[0])
	default:
		cell = fmt.Sprintf("%s [%s–%s]", thousands(median(v)), thousands(slices.Min(v)), thousands(slices.Max(v)))
	}
	if n := len(rs) - len(v); n > 0 && len(v) > 0 {
		cell += fmt.Sprintf(" (%d of %d runs failed)", n, len(rs))
	}
	return cell
}

// cellP99 is "min–max" of the runs' put→ack p99 in ms, or "–".
func cellP99(rs []run) string {
	rs = good(rs)
	if len(rs) == 0 {
		return "–"
	}
	lo, hi := rs[0].putP99, rs[0].putP99
	for _, r := range rs {
		lo, hi = min(lo, r.putP99), max(hi, r.putP99)
	}
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

type row struct {
	name, durable string
	emq           bool
	bySize        map[string][]run
}

func (s *session) rows() []row {
	var rows []row
	known := map[string]bool{}
	for _, p := range peers {
		known[p.label] = true
		if runs := s.peerRuns[p.label]; len(runs) > 0 {
			rows = append(rows, row{name: p.name, durable: p.durable, bySize: runs})
		}
	}
	var other []string
	for label := range s.peerRuns {
		// emq-w1, emq-w32: EMQ as its own process among the peers, for
		// its CPU a job (writeCPU); its rows here are emq bench's.
		if _, ok := replicated[label]; !ok && !known[label] && !strings.HasPrefix(label, "emq-") {
			other = append(other, label)
		}
	}
	slices.Sort(other)
	for _, label := range other {
		rows = append(rows, row{name: label, durable: "?", bySize: s.peerRuns[label]})
	}
	for _, k := range []struct{ kind, name string }{
		{"ack", "**EMQ `--ack-only`** (sender waits for the ACK, as the peers' producers do)"},
		{"w1", "EMQ `--window 1` (sender waits for the REPLY)"},
		{"w32", "EMQ `--window 32` (32 Requests in flight a sender)"},
	} {
		bySize := map[string][]run{}
		for _, size := range sizes {
			if rs := s.emqRuns(k.kind, size); len(rs) > 0 {
				bySize[size] = rs
			}
		}
		if len(bySize) > 0 {
			rows = append(rows, row{name: k.name, durable: "yes", emq: true, bySize: bySize})
		}
	}
	return rows
}

func (s *session) write(w io.Writer) {
	fmt.Fprintln(w, "## EMQ beside the peers")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "One session on this machine (%s), written by `make bench`", cmp.Or(s.date, "undated"))
	if s.commit != "" {
		fmt.Fprintf(w, " at EMQ %s", s.commit)
	}
	fmt.Fprintln(w, ". The peers run through")
	fmt.Fprintln(w, "`../shared/anchors/run.sh` (servers on loopback, fsync on, their own load tools), EMQ")
	fmt.Fprintln(w, "through `emq bench` (its broker in the bench process, journal on the same disk). 100-byte")
	fmt.Fprintln(w, "jobs; P producers each wait for their put's acknowledgement, C consumers complete every")
	fmt.Fprintln(w, "job; jobs/s runs from the first put to the last completion. Each cell is the median")
	fmt.Fprintln(w, "[min–max] of the runs; put→ack p99 is the range of the runs' p99.")
	if s.probeUS > 0 {
		fmt.Fprintf(w, "The disk's synced write (run.sh's `disk-probe`, 200-byte `dd oflag=dsync`) took %.0f µs.\n", s.probeUS)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | durable per job? | 1:1 jobs/s | 4:4 jobs/s | 16:16 jobs/s | put→ack p99 ms 1:1 / 4:4 / 16:16 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	rows := s.rows()
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s / %s / %s |\n", r.name, r.durable,
			cellJobs(r.bySize["1:1"]), cellJobs(r.bySize["4:4"]), cellJobs(r.bySize["16:16"]),
			cellP99(r.bySize["1:1"]), cellP99(r.bySize["4:4"]), cellP99(r.bySize["16:16"]))
	}
	fmt.Fprintln(w)
	s.writeGoals(w, rows)
	s.writeCPU(w)
	s.writeRounds(w)
	s.writeReplicated(w)
	s.writePubSub(w)
	s.writeAlone(w)
	s.writeStored(w)
}

// writeCPU is the servers' CPU a job (run.sh's SERVER_CPU=1: utime and
// stime of each server's processes over its runs, EMQ as its own emq
// broker), and EMQ's against the least of the durable peers'.
func (s *session) writeCPU(w io.Writer) {
	if len(s.cpu) == 0 {
		return
	}
	fmt.Fprintln(w, "### Server CPU a job")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "µs of CPU (user and system) the server's processes took a job over the runs above")
	fmt.Fprintln(w, "(`SERVER_CPU=1 ../shared/anchors/run.sh`), EMQ as its own `emq broker` process beside")
	fmt.Fprintln(w, "them, its load through `emq-load`; the client and worker processes are not counted.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | 1:1 | 4:4 | 16:16 |")
	fmt.Fprintln(w, "|---|---|---|---|")
	cell := func(label, size string) string {
		v := s.cpu[label][size]
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", median(v))
	}
	type line struct{ label, name string }
	var lines []line
	for _, p := range peers {
		if s.cpu[p.label] != nil {
			lines = append(lines, line{p.label, p.name})
		}
	}
	lines = append(lines, line{"emq-w1", "**EMQ** (window 1)"}, line{"emq-w32", "**EMQ** (window 32)"})
	for _, l := range lines {
		if s.cpu[l.label] == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", l.name, cell(l.label, "1:1"), cell(l.label, "4:4"), cell(l.label, "16:16"))
	}
	fmt.Fprintln(w)
	for _, size := range []string{"1:1", "16:16"} {
		ours := s.cpu["emq-w1"][size]
		best, bestName := math.Inf(1), ""
		for _, p := range peers {
			if v := s.cpu[p.label][size]; p.durable == "yes" && len(v) > 0 && median(v) < best {
				best, bestName = median(v), p.name
			}
		}
		if len(ours) == 0 || bestName == "" {
			continue
		}
		ratio := median(ours) / best
		verdict := "reached"
		if ratio > 0.5 {
			verdict = "**not reached**"
		}
		fmt.Fprintf(w, "- %s: EMQ %.0f µs a job, the least of the durable peers (%s) %.0f: %.2f× (target at most 0.5×): %s.\n",
			size, median(ours), bestName, best, ratio, verdict)
	}
	fmt.Fprintln(w)
}

// writeGoals compares EMQ --ack-only with the fastest durable peer at
// each size, and the 1:1 time per job with two synced writes.
func (s *session) writeGoals(w io.Writer, rows []row) {
	var lines []string
	for _, size := range sizes {
		emq := median(jobsPerSec(s.emqRuns("ack", size)))
		if emq == 0 {
			continue
		}
		best, bestName := 0.0, ""
		for _, r := range rows {
			if r.durable != "yes" || r.emq {
				continue
			}
			if m := median(jobsPerSec(r.bySize[size])); m > best {
				best, bestName = m, r.name
			}
		}
		if best == 0 {
			continue
		}
		verdict := "ahead"
		if emq <= best {
			verdict = "behind"
		}
		lines = append(lines, fmt.Sprintf("- %s: EMQ `--ack-only` %s jobs/s, the fastest durable peer (%s) %s: %.2f×, %s.",
			size, thousands(emq), bestName, thousands(best), emq/best, verdict))
	}
	if emq := median(jobsPerSec(s.emqRuns("ack", "1:1"))); emq > 0 && s.probeUS > 0 {
		perJob := 1e6 / emq
		line := fmt.Sprintf("- 1:1: %.0f µs a job against two synced writes (%.0f µs): %.2f× (goal: at most 1.5×).",
			perJob, 2*s.probeUS, perJob/(2*s.probeUS))
		var commits, commitMs []float64
		for _, r := range s.emq {
			if r.kind == "ack" && r.label == "1:1" && !r.bad() && r.num("commits_per_job") > 0 {
				commits = append(commits, r.num("commits_per_job"))
				commitMs = append(commitMs, r.num("commit_mean_ms"))
			}
		}
		if len(commits) > 0 {
			c, ms := median(commits), median(commitMs)
			line += fmt.Sprintf(" Of it, %.2f journal commits a job of %.0f µs each (%.0f µs), the rest (%.0f µs) the round trip"+
				" between one ACK and the next REQUEST's commit.", c, ms*1e3, c*ms*1e3, perJob-c*ms*1e3)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "Goals (issue 18), from the medians above:")
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

// writeRounds is the 1:1 comparison taken in turn: in each round the
// closest peer, then EMQ, on the disk as it was then.
func (s *session) writeRounds(w io.Writer) {
	var labels []string
	for _, r := range s.emq {
		if r.kind == "round" && s.rounds[r.label] != nil && !r.bad() {
			labels = append(labels, r.label)
		}
	}
	if len(labels) == 0 {
		return
	}
	fmt.Fprintln(w, "1:1 taken in turn: the disk's synced-write time drifts by tens of percent over minutes")
	fmt.Fprintln(w, "here, so each round measures it, then beanstalkd -f 0 (the closest durable peer at 1:1 in every session so far), then")
	fmt.Fprintln(w, "EMQ `--ack-only`, one run each:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| round | synced write | beanstalkd -f 0 jobs/s | EMQ jobs/s | EMQ ÷ beanstalkd | EMQ's time a job ÷ two synced writes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	ahead := 0
	var ratios []float64
	for _, label := range labels {
		round := s.rounds[label]
		peer := median(jobsPerSec(round.peerRuns["beanstalkd-fsync"]["1:1"]))
		emq := median(jobsPerSec(s.emqRuns("round", "1:1", label)))
		if peer == 0 || emq == 0 {
			continue
		}
		ratio := emq / peer
		ratios = append(ratios, ratio)
		if ratio > 1 {
			ahead++
		}
		synced := "–"
		if round.probeUS > 0 {
			synced = fmt.Sprintf("%.2f×", 1e6/emq/(2*round.probeUS))
		}
		fmt.Fprintf(w, "| %s | %.0f µs | %s | %s | %.2f× | %s |\n", label, round.probeUS, thousands(peer), thousands(emq), ratio, synced)
	}
	fmt.Fprintln(w)
	if len(ratios) > 0 {
		fmt.Fprintf(w, "EMQ ahead in %d of %d rounds; median EMQ ÷ beanstalkd %.2f×.\n\n", ahead, len(ratios), median(ratios))
	}
}

// writeReplicated is EMQ's group on etcd beside JetStream R3, with the
// etcd operations a job cost and issue 34's targets.
func (s *session) writeReplicated(w io.Writer) {
	r3 := s.peerRuns["jetstream-r3"]
	ack := map[string][]run{}
	for _, size := range sizes {
		if rs := s.emqRuns("etcd-ack", size); len(rs) > 0 {
			ack[size] = rs
		}
	}
	w32 := s.emqRuns("etcd-w32", "16:16")
	if len(r3) == 0 && len(ack) == 0 && len(w32) == 0 {
		return
	}
	ops := func(kind, size string) string {
		var v []float64
		for _, r := range s.emq {
			if r.kind == kind && fmt.Sprintf("%.0f:%.0f", r.num("senders"), r.num("slots")) == size && !r.bad() && r.num("etcd_ops_per_job") > 0 {
				v = append(v, r.num("etcd_ops_per_job"))
			}
		}
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", median(v))
	}
	fmt.Fprintln(w, "Replicated, in the same session: EMQ as one broker of a group on three members of etcd")
	fmt.Fprintln(w, "on this machine (`scripts/bench-etcd.sh`: Debian's etcd-server, fsync on), `emq bench --ack-only`")
	fmt.Fprintln(w, "against it; JetStream R3 as three clustered nats-servers, sync always, stream replicas 3")
	fmt.Fprintln(w, "(`run.sh jetstream`, `JETSTREAM_MODES=r3`). The servers, the brokers and the load share the")
	fmt.Fprintln(w, "machine's cores. etcd ops a job: member 1's puts, deletes and reads (its `etcd_mvcc_*_total`)")
	fmt.Fprintln(w, "over the run, per job.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | 1:1 jobs/s | 4:4 jobs/s | 16:16 jobs/s | 16:16 window 32 jobs/s | put→ack p99 ms 1:1 / 4:4 / 16:16 | etcd ops a job 1:1 / 4:4 / 16:16 / window 32 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	if len(r3) > 0 {
		fmt.Fprintf(w, "| %s | %s | %s | %s | – | %s / %s / %s | – |\n", replicated["jetstream-r3"],
			cellJobs(r3["1:1"]), cellJobs(r3["4:4"]), cellJobs(r3["16:16"]), cellP99(r3["1:1"]), cellP99(r3["4:4"]), cellP99(r3["16:16"]))
	}
	if len(ack) > 0 || len(w32) > 0 {
		fmt.Fprintf(w, "| **EMQ on etcd, `--ack-only`** | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s / %s |\n",
			cellJobs(ack["1:1"]), cellJobs(ack["4:4"]), cellJobs(ack["16:16"]), cellJobs(w32),
			cellP99(ack["1:1"]), cellP99(ack["4:4"]), cellP99(ack["16:16"]),
			ops("etcd-ack", "1:1"), ops("etcd-ack", "4:4"), ops("etcd-ack", "16:16"), ops("etcd-w32", "16:16"))
	}
	fmt.Fprintln(w)
	reached := func(ok bool) string {
		if ok {
			return "reached"
		}
		return "**not reached**"
	}
	var lines []string
	for _, t := range []struct {
		size string
		want float64
	}{{"16:16", 2}, {"1:1", 1.5}} {
		emq, peer := median(jobsPerSec(ack[t.size])), median(jobsPerSec(r3[t.size]))
		if emq > 0 && peer > 0 {
			lines = append(lines, fmt.Sprintf("- %s: EMQ on etcd %s jobs/s, JetStream R3 %s: %.2f× (target at least %g×): %s.",
				t.size, thousands(emq), thousands(peer), emq/peer, t.want, reached(emq/peer >= t.want)))
		}
	}
	if v := median(jobsPerSec(w32)); v > 0 {
		lines = append(lines, fmt.Sprintf("- 16:16 window 32 on etcd: %s jobs/s (target at least 10,000): %s.", thousands(v), reached(v >= 10000)))
	}
	worst := 0.0
	for _, r := range s.emq {
		if (r.kind == "etcd-ack" || r.kind == "etcd-w32") && !r.bad() {
			worst = max(worst, r.num("etcd_ops_per_job"))
		}
	}
	if worst > 0 {
		lines = append(lines, fmt.Sprintf("- etcd operations a job, the most of any run: %.2f (target at most 2): %s.", worst, reached(worst <= 2)))
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "Targets (issue 34), from the medians above:")
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
	}
}

func (s *session) writePubSub(w io.Writer) {
	var emq []run
	for _, r := range s.emq {
		if r.kind == "pubsub" {
			emq = append(emq, run{jobsPerSec: r.num("deliveries_per_sec"), failed: r.bad()})
		}
	}
	if len(emq) == 0 && len(s.pubsub) == 0 {
		return
	}
	fmt.Fprintln(w, "Pub/sub fan-out, 1 publisher → 16 subscribers, 100-byte messages; deliveries/s runs from the")
	fmt.Fprintln(w, "first publish to the last delivery (a run that loses messages counts as failed):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | deliveries/s |")
	fmt.Fprintln(w, "|---|---|")
	var labels []string
	for label := range s.pubsub {
		labels = append(labels, label)
	}
	slices.Sort(labels)
	for _, label := range labels {
		name := label
		if label == "nats-pubsub" {
			name = "NATS core pub/sub"
		}
		fmt.Fprintf(w, "| %s | %s |\n", name, cellJobs(s.pubsub[label]))
	}
	if len(emq) > 0 {
		fmt.Fprintf(w, "| EMQ `emq bench --pubsub` | %s |\n", cellJobs(emq))
	}
	fmt.Fprintln(w)
}

// writeAlone is EMQ's own table: the shapes no peer is run in (a paced
// rate, a million jobs stored).
func (s *session) writeAlone(w io.Writer) {
	var alone []emqRun
	for _, r := range s.emq {
		if r.kind == "alone" {
			alone = append(alone, r)
		}
	}
	if len(alone) == 0 {
		return
	}
	fmt.Fprintln(w, "## EMQ alone")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`emq bench` with each sender keeping its window of Requests in flight until their")
	fmt.Fprintln(w, "REPLY (32 unless said).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| senders×slots | jobs | jobs/s | ACK p50 | ACK p99 | ACK p99.9 | REPLY p50 | REPLY p99 | lost | command |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range alone {
		cmd := fmt.Sprintf("emq bench --senders %.0f --window %.0f --slots %.0f --jobs %.0f", r.num("senders"), r.num("window"), r.num("slots"), r.num("jobs"))
		if v := r.num("rate"); v > 0 {
			cmd += fmt.Sprintf(" --rate %g", v)
		}
		if v := r.num("preload"); v > 0 {
			cmd += fmt.Sprintf(" --preload %.0f", v)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.0f | `%s` |\n",
			r.label, r.num("jobs"), thousands(r.num("jobs_per_sec")), r.num("ack_p50_ms"), r.num("ack_p99_ms"), r.num("ack_p999_ms"),
			r.num("e2e_p50_ms"), r.num("e2e_p99_ms"), r.num("lost"), cmd)
	}
	fmt.Fprintln(w)
	for _, r := range alone {
		if n := r.num("preload"); n > 0 {
			fmt.Fprintf(w, "With %s jobs stored before the start (a queue nobody serves): the broker was ready in %.1f s;"+
				" the bench process (broker, clients and worker together) ended at %.0f MiB resident.\n\n",
				thousands(n), r.num("replay_seconds"), r.num("rss_mib"))
		}
	}
}

// storedMin is the least a run with a million jobs stored may do against
// an empty journal's, in the same round (DESIGN.md: within 10 %).
const storedMin = 0.9

// writeStored is the rounds of an empty journal and one with jobs
// preloaded, taken in turn: each round's ratio and the verdict.
func (s *session) writeStored(w io.Writer) {
	type round struct{ empty, full *emqRun }
	rounds := map[string]*round{}
	var names []string
	for i, r := range s.emq {
		if r.kind != "stored" || r.bad() {
			continue
		}
		name, which, ok := strings.Cut(r.label, " ")
		if !ok {
			continue
		}
		if rounds[name] == nil {
			rounds[name] = &round{}
			names = append(names, name)
		}
		switch which {
		case "empty":
			rounds[name].empty = &s.emq[i]
		case "full":
			rounds[name].full = &s.emq[i]
		}
	}
	var full *emqRun
	var ratios []float64
	for _, name := range names {
		if r := rounds[name]; r.empty != nil && r.full != nil {
			if full == nil {
				full = r.full
				fmt.Fprintf(w, "A full journal against an empty one: `emq bench --senders %.0f --window %.0f --slots %.0f --jobs %.0f`, "+
					"then the same with `--preload %.0f` (jobs stored before the start, in a queue nobody serves), in turn:\n\n",
					full.num("senders"), full.num("window"), full.num("slots"), full.num("jobs"), full.num("preload"))
				fmt.Fprintln(w, "| round | empty jobs/s | stored jobs/s | stored ÷ empty |")
				fmt.Fprintln(w, "|---|---|---|---|")
			}
			ratio := r.full.num("jobs_per_sec") / r.empty.num("jobs_per_sec")
			ratios = append(ratios, ratio)
			fmt.Fprintf(w, "| %s | %s | %s | %.2f |\n", name, thousands(r.empty.num("jobs_per_sec")), thousands(r.full.num("jobs_per_sec")), ratio)
		}
	}
	if full == nil {
		return
	}
	ok := 0
	for _, r := range ratios {
		if r >= storedMin {
			ok++
		}
	}
	verdict := "reached"
	if ok < len(ratios) {
		verdict = "**not reached**"
	}
	fmt.Fprintf(w, "\nTarget (at least %.0f %% of empty): %s in %d of %d rounds (median %.2f). With %s jobs stored, the broker was ready in %.1f s;"+
		" the bench process (broker, clients and worker together) ended at %.0f MiB resident.\n\n",
		storedMin*100, verdict, ok, len(ratios), median(ratios), thousands(full.num("preload")), full.num("replay_seconds"), full.num("rss_mib"))
}
