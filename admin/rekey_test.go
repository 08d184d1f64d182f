package admin_test

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/storetest"
)

// Keys rotated online through the admin API: a journal written under key
// "old", reopened with "new" first, is sealed again under "new" by POST
// /api/v1/journal/rekey (the full token only; the read-only one may
// watch), whose progress GET, the stats and /metrics show; at its end
// the journal no longer needs "old" and opens without it.
func TestRekeyAPI(t *testing.T) {
	t.Parallel()
	keys := storetest.Keys(t, "old", "new")
	ring := func(names ...string) *store.Keyring {
		k, err := keys.With(names...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	const jobs = 300
	b := bt.Start(t, "", func(o *broker.Options) { o.JournalKeys = ring("old") })
	c := bt.Dial(t, b.Frontend(), "c")
	for i := range jobs {
		c.Request("q", "", fmt.Appendf(nil, "payload %d", i))
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.Dir, broker.JournalFile)
	opens := func(k *store.Keyring) error {
		opts := boltstore.DefaultOptions()
		opts.ReadOnly, opts.Keys = true, k
		j, err := boltstore.Open(path, opts)
		if err == nil {
			j.Close()
		}
		return err
	}
	if err := opens(ring("new")); err == nil || !strings.Contains(err.Error(), "key old") {
		t.Fatalf("before the rekey, the journal opened with key new alone: %v", err)
	}

	b = bt.StartAdmin(t, b.Dir, func(o *broker.Options) { o.JournalKeys = ring("new", "old") },
		func(o *admin.Options) { o.Token, o.ReadToken = "admin-tok", "read-tok" })
	var st store.RekeyStatus
	if code := bt.API(t, b, "GET", "/api/v1/journal/rekey", "read-tok", &st); code != http.StatusOK || st.Key != "" {
		t.Fatalf("GET rekey before any: %d %+v", code, st)
	}
	if code := bt.API(t, b, "POST", "/api/v1/journal/rekey", "read-tok", nil); code != http.StatusForbidden {
		t.Fatalf("POST rekey with the read-only token: %d, want 403", code)
	}
	if code := bt.API(t, b, "POST", "/api/v1/journal/rekey?rate=-1", "admin-tok", nil); code != http.StatusBadRequest {
		t.Fatalf("POST rekey?rate=-1: %d, want 400", code)
	}
	if st := b.RekeyStatus(); st.Key != "" {
		t.Fatalf("a refused POST started a rekey: %s", st)
	}
	if code := bt.API(t, b, "POST", "/api/v1/journal/rekey?rate=1000000", "admin-tok", nil); code != http.StatusAccepted {
		t.Fatalf("POST rekey: %d, want 202", code)
	}
	bt.Eventually(t, "the rekey finished", func() bool {
		st = store.RekeyStatus{}
		bt.API(t, b, "GET", "/api/v1/journal/rekey", "read-tok", &st)
		return !st.Running && !st.Finished.IsZero()
	})
	if st.Key != "new" || st.Rate != 1000000 || st.Resealed < jobs || st.Left != 0 || !slices.Equal(st.Dropped, []string{"old"}) {
		t.Fatalf("the rekey's end: %+v; want every job sealed again under new, old dropped", st)
	}

	var stats admin.StatsInfo
	if code := bt.API(t, b, "GET", "/api/v1/stats", "read-tok", &stats); code != http.StatusOK || stats.Rekey == nil ||
		stats.Rekey.Key != "new" || stats.Rekey.Resealed != st.Resealed || !slices.Equal(stats.Rekey.Dropped, []string{"old"}) {
		t.Fatalf("stats: %d, rekey %+v; want the rekey's end", code, stats.Rekey)
	}
	if stats.Get("acked") != 0 || len(stats.Errors) == 0 {
		t.Fatalf("stats with a rekey: counters %v, errors %v", stats.Counters, stats.Errors)
	}
	mf := bt.ScrapeMetricsAs(t, b, "read-tok")
	for name, want := range map[string]float64{"emq_journal_rekey_running": 0, "emq_journal_rekey_resealed": float64(st.Resealed),
		"emq_journal_rekey_left": 0, "emq_journal_rekey_rate": 1000000} {
		if got := bt.MetricValue(t, mf, name, ""); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}

	// The client's calls: a second rekey finds nothing to seal.
	cl, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr(), Token: "admin-tok"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.Rekey(t.Context(), 0)
	if err != nil || again.Key != "new" || again.Rate != store.DefaultRekeyRate {
		t.Fatalf("Client.Rekey: %+v %v; want a rekey under new at the default rate", again, err)
	}
	bt.Eventually(t, "the second rekey finished", func() bool {
		st, err = cl.RekeyStatus(t.Context())
		return err == nil && !st.Running && !st.Finished.IsZero()
	})
	if st.Resealed != 0 || len(st.Dropped) != 0 {
		t.Fatalf("a rekey with nothing under an older key: %+v", st)
	}
	reader, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr(), Token: "read-tok"})
	if err != nil {
		t.Fatal(err)
	}
	var refused *admin.Error
	if _, err := reader.Rekey(t.Context(), 0); !errors.As(err, &refused) || refused.Status != http.StatusForbidden || refused.Code != "read_only" {
		t.Fatalf("Client.Rekey with the read-only token: %v", err)
	}

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := opens(ring("new")); err != nil {
		t.Fatalf("after the rekey, the journal does not open with key new alone: %v", err)
	}
}

// A journal without keys has nothing to seal under: 409 no_keys, which
// says how to give it keys.
func TestRekeyWithoutKeys(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, nil)
	code, text := bt.Post(t, b, "/api/v1/journal/rekey", nil)
	if code != http.StatusConflict || !strings.Contains(text, `"no_keys"`) || !strings.Contains(text, "--journal-keys") {
		t.Fatalf("POST rekey without keys: %d %s", code, text)
	}
	var stats map[string]any
	if bt.API(t, b, "GET", "/api/v1/stats", "", &stats) != http.StatusOK || stats["rekey"] != nil {
		t.Fatalf("stats without a rekey: %v", stats)
	}
}
