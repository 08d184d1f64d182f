package broker_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	bt "github.com/eventmq/emq/internal/brokertest"
)

// postUntil sends jobs to queue keep through the HTTP job API from 16
// senders, until stop; it sends each msgid answered 201 on created.
func postUntil(t *testing.T, adminAddr, prefix string, stop <-chan struct{}, created chan<- string) {
	hc := &http.Client{Timeout: bt.Wait, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	for s := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%s-%d-%d", prefix, s, i)
				req, _ := http.NewRequest("POST", "http://"+adminAddr+"/api/v1/queues/keep/jobs", bytes.NewReader([]byte(id)))
				req.Header.Set("Content-Type", "application/octet-stream")
				req.Header.Set("Idempotency-Key", id)
				resp, err := hc.Do(req)
				if err != nil {
					return // the broker is gone
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					created <- id
				}
			}
		})
	}
	wg.Wait()
}

// A job answered 201 by the HTTP job API is durable, as an ACKed one is:
// the journal's folder loses every write not flushed (cutfs) and the
// broker child is SIGKILLed at the same moment, while 16 senders post
// jobs; after each cut every job answered 201 is stored, once. 4 cuts;
// 40 with EMQ_TORTURE.
func TestPowerCutLosesNoJobAnswered201(t *testing.T) {
	t.Parallel()
	rounds := 4
	if torture() {
		rounds = 40
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	root := t.TempDir()
	created := map[string]bool{}
	for round := range rounds {
		fs := mountCut(t, root)
		frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
		adminAddr := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
		c := startChild(t, fs.Dir(), frontend, backend, "EMQ_TEST_SEGMENT=1048576", "EMQ_TEST_ADMIN="+adminAddr)
		stop := make(chan struct{})
		answered := make(chan string, 4096)
		var done sync.WaitGroup
		done.Go(func() { postUntil(t, adminAddr, fmt.Sprintf("r%d", round), stop, answered) })
		cutAt := 50 + rng.IntN(500)
		for range cutAt {
			select {
			case id := <-answered:
				created[id] = true
			case <-time.After(bt.Wait):
				t.Fatalf("round %d: no 201 for %v", round, bt.Wait)
			}
		}
		tear := round%2 == 1
		what := fs.Cut(tear, rng)
		c.kill()
		close(stop)
		done.Wait()
		close(answered)
		for id := range answered { // answered before the cut: flushed
			created[id] = true
		}
		if err := fs.Unmount(); err != nil {
			t.Fatal(err)
		}
		storedOnce(t, root, created, fmt.Sprintf("round %d (%s)", round, what))
		t.Logf("round %d: cut after %d answers: %s; %d jobs answered 201 stored, each once", round, cutAt, what, len(created))
	}
}
