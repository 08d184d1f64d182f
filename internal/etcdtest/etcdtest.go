// Package etcdtest runs a real etcd cluster for tests: members embedded
// in the test process (go.etcd.io/etcd/server/v3/embed), on loopback
// ports, their data in the test's temp dir.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*embed.Etcd
	clients []string
}

// Start runs an etcd cluster of n members; it is stopped at cleanup.
func Start(t testing.TB, n int) *Cluster { return StartWith(t, n, Config{}) }

// Config changes what Start runs.
type Config struct {
	// CertFile and KeyFile, when set, make the client URLs https with
	// this certificate (PEM files).
	CertFile, KeyFile string
	// QuotaBytes, when set, is each member's space quota
	// (--quota-backend-bytes).
	QuotaBytes int64
}

// StartWith runs an etcd cluster of n members as cfg says; it is
// stopped at cleanup.
func StartWith(t testing.TB, n int, with Config) *Cluster {
	t.Helper()
	skipShort(t)
	// A port freeURL found free may be taken by another process before a
	// member binds it: then the cluster starts again on other ports.
	for range 2 {
		if c, err := startWith(t, n, with); err == nil {
			return c
		} else if !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("etcd: %v", err)
		}
	}
	c, err := startWith(t, n, with)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	return c
}

func startWith(t testing.TB, n int, with Config) (*Cluster, error) {
	c := &Cluster{t: t, members: make([]*embed.Etcd, n), clients: make([]string, n)}
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(cfg.Dir, "etcd.log")} // its errors at shutdown are noise
		cfg.QuotaBackendBytes = with.QuotaBytes
		// bcrypt's default cost takes seconds a password check under the
		// race detector on a loaded machine: more than a client's dial
		// timeout, where authentication happens.
		cfg.BcryptCost = uint(bcrypt.MinCost)
		peer, client := freeURL(t), freeURL(t)
		if with.CertFile != "" {
			client.Scheme = "https"
			cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = with.CertFile, with.KeyFile
		}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = "emq-test"
		initial = append(initial, cfg.Name+"="+peer.String())
		c.clients[i] = client.String()
		cfgs[i] = cfg
	}
	errs := make(chan error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		go func() {
			e, err := embed.StartEtcd(cfg)
			if err == nil {
				c.mu.Lock()
				c.members[i] = e
				c.mu.Unlock()
				select {
				case <-e.Server.ReadyNotify():
				case <-time.After(30 * time.Second):
					err = fmt.Errorf("etcd member %s not ready within 30 s", cfg.Name)
				}
			}
			errs <- err
		}()
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		for i := range c.members {
			c.Stop(i)
		}
		return nil, first
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.clients...) }

// Stop stops member i (again: nothing).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	e := c.members[i]
	c.members[i] = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

func freeURL(t testing.TB) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// Leftovers are goleak options for what embedded etcd members leave
// behind for a moment after Close: the keep-alive connections between
// members, which end on their own.
var Leftovers = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
}

// skipShort skips a test that needs etcd under -short: make check, the
// edit-test loop, runs what needs no etcd; make test and CI run these.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real etcd cluster: not under -short (make check); make test runs it")
	}
}
