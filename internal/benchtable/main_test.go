package main

import (
	"strings"
	"testing"
)

// The table a make bench session writes, from run.sh's per-run lines and
// emq bench's JSON: medians and ranges, failed runs left out and counted,
// the goals against the fastest durable peer and the disk's synced write.
func TestTable(t *testing.T) {
	s, err := load("testdata/anchors", "testdata/emq.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.loadRounds("testdata"); err != nil {
		t.Fatal(err)
	}
	s.commit, s.date = "abc1234", "2026-12-01"
	var b strings.Builder
	s.write(&b)
	out := b.String()
	for _, want := range []string{
		"at EMQ abc1234",
		"took 250 µs",
		"| beanstalkd -f 0 (fsync every write) | yes | 2,000 [1,900–2,100] | – | – | 0.60–0.70 / – / – |",
		"| NATS JetStream, sync_interval always | yes | – | – | 3,000 (1 of 2 runs failed) | – / – / 5.00 |",
		"| 2,400 [2,300–2,500] | – | 12,000 | 0.50–0.90 / – / 2.50 |",
		"- 1:1: EMQ `--ack-only` 2,400 jobs/s, the fastest durable peer (beanstalkd -f 0 (fsync every write)) 2,000: 1.20×, ahead.",
		"- 1:1: 417 µs a job against two synced writes (500 µs): 0.83×",
		"1.00 journal commits a job of 300 µs each (300 µs), the rest (117 µs)",
		"| NATS core pub/sub | 2,550,000 [2,450,000–2,650,000] |",
		"| EMQ `emq bench --pubsub` | 3,100,000 |",
		"the broker was ready in 5.4 s",
		"| 1 | 20,000 | 19,000 | 0.95 |",
		"| 2 | 20,000 | 15,000 | 0.75 |",
		"Target (at least 90 % of empty): **not reached** in 1 of 2 rounds (median 0.85). With 1,000,000 jobs stored, the broker was ready in 2.5 s",
		"| 1 | 300 µs | 1,400 | 1,500 | 1.07× | 1.11× |",
		"| 2 | 250 µs | 1,600 | 1,500 | 0.94× | 1.33× |",
		"EMQ ahead in 1 of 2 rounds",
		"| NATS JetStream R3 (3 servers), sync always | 250 | – | 1,400 [1,300–1,500] | – | 6.00 / – / 12.00–14.00 | – |",
		"| **EMQ on etcd, `--ack-only`** | 300 | – | 3,200 [3,000–3,400] | 9,000 | 5.00 / – / 9.00–11.00 | 2.00 / – / 2.00 / 1.50 |",
		"- 16:16: EMQ on etcd 3,200 jobs/s, JetStream R3 1,400: 2.29× (target at least 2×): reached.",
		"- 1:1: EMQ on etcd 300 jobs/s, JetStream R3 250: 1.20× (target at least 1.5×): **not reached**.",
		"- 16:16 window 32 on etcd: 9,000 jobs/s (target at least 10,000): **not reached**.",
		"- etcd operations a job, the most of any run: 2.10 (target at most 2): **not reached**.",
		"| beanstalkd -f 0 (fsync every write) | 208 | – | 158 |",
		"| asynq, Redis appendfsync always | 449 | – | 299 |",
		"| **EMQ** (window 32) | – | – | 42 |",
		"- 1:1: EMQ 404 µs a job, the least of the durable peers (beanstalkd -f 0 (fsync every write)) 208: 1.94× (target at most 0.5×): **not reached**.",
		"- 16:16: EMQ 70 µs a job, the least of the durable peers (beanstalkd -f 0 (fsync every write)) 158: 0.44× (target at most 0.5×): reached.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| emq-w1 |") {
		t.Errorf("EMQ's runs as a process among the peers (for its CPU) are a row of the peers' table:\n%s", out)
	}
	if strings.Contains(out, "| jetstream-r3 |") {
		t.Errorf("JetStream R3 is in the single machine's table:\n%s", out)
	}
	if strings.Contains(out, "4:4: EMQ") {
		t.Errorf("a size with no peer figure got a verdict:\n%s", out)
	}
}

func TestBadRunsFile(t *testing.T) {
	if _, err := load("", "testdata/anchors/results.txt"); err == nil || !strings.Contains(err.Error(), "KIND<TAB>LABEL<TAB>JSON") {
		t.Fatalf("a file of the wrong shape: err = %v, want one naming the line format", err)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", 12000: "12,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%v) = %q, want %q", n, got, want)
		}
	}
}
