package etcdstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
	"github.com/eventmq/emq/store/storetest"
)

// keysHolding names the keys under prefix whose values hold text.
func keysHolding(t *testing.T, cli *clientv3.Client, prefix, text string) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), text) {
			found = append(found, string(kv.Key))
		}
	}
	return found
}

// With keys, no value under the journal's prefix holds what users sent
// (payloads, headers, errors, results, schedules), and all of it reads
// back, also after a reopen; without keys the scan finds it. The prefix
// is at format 6, which a binary that knows no encryption refuses.
func TestEtcdEncryptedAtRestHoldsNoPlaintext(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	const marker = "EMQ-PLAINTEXT-MARKER-e7c2"
	for _, keyed := range []bool{false, true} {
		opts := etcdstore.DefaultOptions()
		opts.Prefix = "/clear/"
		if keyed {
			opts.Prefix, opts.Keys = "/sealed/", storetest.Keys(t, "k1")
		}
		j, err := etcdstore.Open(cli, opts)
		if err != nil {
			t.Fatal(err)
		}
		check := storetest.Secrets(t, j, marker)
		found := keysHolding(t, cli, opts.Prefix, marker)
		format, err := cli.Get(context.Background(), opts.Prefix+"meta/format")
		if err != nil || len(format.Kvs) != 1 {
			t.Fatalf("format: %v, %v", format, err)
		}
		if !keyed {
			if len(found) == 0 || string(format.Kvs[0].Value) != "5" {
				t.Fatalf("without keys: marker in %v, format %s; want it found, format 5", found, format.Kvs[0].Value)
			}
			j.Close()
			continue
		}
		if len(found) > 0 {
			t.Fatalf("the marker is in %v", found)
		}
		if string(format.Kvs[0].Value) != "6" {
			t.Fatalf("format %s; want 6", format.Kvs[0].Value)
		}
		check(t, j)
		j.Close()
		j = openEtcd(t, cli, opts)
		check(t, j)
		if names, err := j.EncryptedWith(); err != nil || !slices.Equal(names, []string{"k1"}) {
			t.Fatalf("encrypted with %v, %v", names, err)
		}
	}
}

// A value whose bytes changed in etcd fails its authentication tag:
// never served; the job goes to the dead letters ("damaged in the
// journal"), a result to the damaged bucket.
func TestEtcdEncryptedDamageIsQuarantined(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	ctx := context.Background()
	opts := etcdstore.DefaultOptions()
	opts.Prefix, opts.Keys = "/damage/", storetest.Keys(t, "k1")
	j := openEtcd(t, cli, opts)
	for _, id := range []string{"p", "r"} {
		if _, err := store.Wait(func(done func(bool, error)) {
			j.Append(&store.Job{MsgID: id, Queue: "q", Headers: "h:1", Payload: []byte("payload " + id)}, done)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Wait(func(done func(bool, error)) {
		j.Complete("r", []byte("a result"), time.Now().Add(time.Hour), nil, done)
	}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	slots, err := cli.Get(ctx, opts.Prefix+"slot/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for _, kv := range slots.Kvs {
		if id, _, err := etcdstore.UnwrapJob(kv.Value); err == nil && string(id) == "p" {
			// A record ends with its payload's encrypted part, then its
			// trail (none: one byte).
			v := slices.Clone(kv.Value)
			v[len(v)-2] ^= 0x01
			if _, err := cli.Put(ctx, string(kv.Key), string(v)); err != nil {
				t.Fatal(err)
			}
			flipped++
		}
	}
	res, err := cli.Get(ctx, opts.Prefix+"results/r")
	if err != nil || len(res.Kvs) != 1 || flipped != 1 {
		t.Fatalf("the result %v, %v; the job's slot found %d times", res, err, flipped)
	}
	v := slices.Clone(res.Kvs[0].Value)
	v[len(v)-1] ^= 0x01
	if _, err := cli.Put(ctx, opts.Prefix+"results/r", string(v)); err != nil {
		t.Fatal(err)
	}

	heard := make(chan store.Damage, 4)
	opts.OnDamage = func(d store.Damage) { heard <- d }
	j = openEtcd(t, cli, opts)
	if err := j.Payloads([]string{"p"}, func(_ int, p []byte, err error) {
		if !errors.Is(err, store.ErrDamaged) {
			t.Errorf("payload of the damaged job: %q, %v; want ErrDamaged", p, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	storetest.SealedDamageQuarantined(t, j, heard, "h:1")
}

// A journal on etcd opens only with every key it was encrypted with,
// each with its bytes, refused by the key's name and the file's.
func TestEtcdEncryptedJournalRefusesWrongKeys(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	a, _ := store.NewJournalKey("a")
	a2, _ := store.NewJournalKey("a")
	b, _ := store.NewJournalKey("b")
	ring := func(file string, lines ...string) *store.Keyring {
		k, err := store.ParseKeyring(file, []byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	opts := etcdstore.DefaultOptions()
	opts.Prefix, opts.Keys = "/keys/", ring("keys-a", a)
	j := openEtcd(t, cli, opts)
	appendJob(t, j, "under-a")
	j.Close()
	for _, c := range []struct {
		what string
		keys *store.Keyring
		want []string
	}{
		{"no keys", nil, []string{"keys a"}},
		{"key a of other bytes", ring("keys-other", a2), []string{"key a", "keys-other", "other bytes"}},
		{"key a missing", ring("keys-b", b), []string{"key a", "keys-b"}},
	} {
		o := opts
		o.Keys = c.keys
		_, err := etcdstore.Open(cli, o)
		if !errors.Is(err, store.ErrKeys) {
			t.Fatalf("%s: %v; want ErrKeys", c.what, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %v; want it to name %q", c.what, err, w)
			}
		}
	}
}

// Keys rotated online on etcd (storetest.RekeyUnderLoad).
func TestEtcdRekeyUnderLoad(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	storetest.RekeyUnderLoad(t, func(keys *store.Keyring) (store.Journal, error) {
		opts := etcdstore.DefaultOptions()
		opts.Prefix, opts.Keys = "/rekey/", keys
		return etcdstore.Open(cli, opts)
	})
}
