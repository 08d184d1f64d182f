package group_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/grouptest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
	"github.com/eventmq/emq/store/storetest"
)

// Keys rotated online in a group, across a failover: the members take
// a new first key (SIGHUP's ReloadJournalKeys; one without the old key
// is refused, naming it); the leader's rekey, paced, is part way when
// the leader is closed; the next leader goes on from where it was, under
// load. At the end nothing is lost, every value in etcd is under the new
// key, and the journal no longer names the old one.
func TestGroupRekeyAcrossFailover(t *testing.T) {
	keys := storetest.Keys(t, "old", "new")
	with := func(names ...string) *store.Keyring {
		k, err := keys.With(names...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	etcd := etcdtest.Start(t, 1).Endpoints()
	c := grouptest.StartOn(t, etcd, 2, grouptest.Config{LeaderTTL: 30 * time.Second,
		Broker: func(_ int, o *broker.Options) { o.JournalKeys = with("old") }})
	first := c.Leader(t)

	// Stored under old: jobs of a queue no worker takes.
	const stored = 1000
	cl, err := client.New(client.Options{Broker: c.Frontends(), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), grouptest.Wait)
	defer cancel()
	for i := 0; i < stored; i += 100 {
		var bulk []client.BulkJob
		for n := i; n < i+100; n++ {
			bulk = append(bulk, client.BulkJob{Queue: "kept", Payload: []byte(fmt.Sprintf("secret %d", n))})
		}
		if _, err := cl.SendBulk(ctx, bulk); err != nil {
			t.Fatal(err)
		}
	}

	if err := first.Group().ReloadJournalKeys(with("new")); err == nil || !strings.Contains(err.Error(), "key old") {
		t.Fatalf("keys without old, still needed, were not refused by its name: %v", err)
	}
	for _, m := range c.Members {
		if err := m.Group().ReloadJournalKeys(with("new", "old")); err != nil {
			t.Fatalf("%s: new keys: %v", m.Name, err)
		}
	}
	load := c.StartLoad(t, 2, "busy")
	load.WaitAcks(t, 50, "jobs acked before the rekey")
	if _, err := first.Group().Rekey(100); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the leader's rekey sealing some", func() bool {
		s, err := first.Group().RekeyStatus()
		return err == nil && s.Resealed > 0
	})
	first.Close(t)

	next := c.Leader(t)
	s, err := next.Group().RekeyStatus()
	if err != nil || !s.Running || s.Resealed == 0 || s.Key != "new" {
		t.Fatalf("the next leader's rekey: %s, %v; want it going on from where the first was", s, err)
	}
	if _, err := next.Group().Rekey(1_000_000); err != nil { // the rest at once
		t.Fatal(err)
	}
	load.WaitAcks(t, 50, "jobs acked during the rekey")
	testutil.Eventually(t, "the rekey ending", func() bool {
		s, err = next.Group().RekeyStatus()
		return err == nil && !s.Finished.IsZero()
	})
	if !slices.Equal(s.Dropped, []string{"old"}) {
		t.Fatalf("the rekey ended as %s, want key old dropped", s)
	}
	load.Check(t)

	// In etcd: every value under new, the journal naming new alone, and
	// every stored job there; it opens with new alone.
	eo := etcdstore.DefaultOptions()
	eo.Prefix, eo.Keys, eo.ReadOnly = group.JournalPrefix(c.Prefix()), with("new"), true
	j, err := etcdstore.Open(c.Etcd(t), eo)
	if err != nil {
		t.Fatalf("the journal with key new alone: %v", err)
	}
	defer j.Close()
	counts, failed, err := j.KeyCounts(true)
	if err != nil || len(failed) > 0 || len(counts) != 1 || counts["new"] < stored {
		t.Fatalf("values by key: %v, failing %v, %v; want all %d and more under new", counts, failed, err, stored)
	}
	names, err := j.EncryptedWith()
	if err != nil || !slices.Equal(names, []string{"new"}) {
		t.Fatalf("the journal names keys %v (%v), want [new]", names, err)
	}
	counts2, err := j.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(counts2, func(c store.Count) bool { return c.Queue == "kept" }); i < 0 || counts2[i].Pending != stored {
		t.Fatalf("counts %+v, want %d pending in queue kept", counts2, stored)
	}
}
