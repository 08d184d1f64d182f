package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Admin requests whose clients go away at any moment (thousands, under
// -race) never race the loop, and every answer that comes is whole: the
// handlers reach the broker through its named API only. Before, a client
// that left mid-request made the GET /api/v1/jobs/{msgid} handler read
// the map of jobs in flight while the loop still filled it.
func TestRequestsCancelledMidFlight(t *testing.T) {
	t.Parallel()
	const held = 200
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	var ids []string
	for range held {
		ids = append(ids, client.Request("q", "", []byte("x")))
	}
	w.Ready(held)
	for range held {
		bt.Expect[*emqp.Request](w)
	}
	base := "http://" + b.AdminAddr()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(hc.CloseIdleConnections)
	check := map[string]func(body []byte) error{
		"/api/v1/jobs/" + ids[0]: func(body []byte) error {
			var ji admin.JobInfo
			if err := json.Unmarshal(body, &ji); err != nil || ji.Worker != "w" || ji.State != "inflight" {
				return fmt.Errorf("job %+v, %v: want it in flight at w", ji, err)
			}
			return nil
		},
		"/api/v1/jobs?state=inflight&limit=1000": func(body []byte) error {
			var p admin.JobPage
			if err := json.Unmarshal(body, &p); err != nil || len(p.Jobs) != held {
				return fmt.Errorf("%d jobs in flight listed, %v: want %d", len(p.Jobs), err, held)
			}
			return nil
		},
		"/api/v1/queues": func(body []byte) error {
			var qs []broker.QueueInfo
			if err := json.Unmarshal(body, &qs); err != nil || len(qs) != 1 || qs[0].InFlight != held {
				return fmt.Errorf("queues %+v, %v: want q with %d in flight", qs, err, held)
			}
			return nil
		},
	}
	var paths []string
	for p := range check {
		paths = append(paths, p)
	}
	rounds := 2000
	if testing.Short() {
		rounds = 500
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, left := 0, 0
	for i := range rounds {
		path := paths[i%len(paths)]
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%2 == 0 { // the client leaves after up to 2 ms; else it waits
				go func() {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // when it leaves, not a synchronisation
					cancel()
				}()
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
			resp, err := hc.Do(req)
			if err == nil {
				var body []byte
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: %d %s", path, resp.StatusCode, body)
					} else {
						err = check[path](body)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				answered++
			case errors.Is(err, context.Canceled):
				left++
			default:
				t.Errorf("%s: %v", path, err)
			}
		})
		if i%32 == 31 {
			wg.Wait()
		}
	}
	wg.Wait()
	t.Logf("%d requests answered, %d left by their clients", answered, left)
	if answered == 0 {
		t.Fatal("no request was answered")
	}
	if code := bt.API(t, b, "GET", "/api/v1/queues", "", nil); code != http.StatusOK {
		t.Fatalf("after the requests: %d", code)
	}
}
