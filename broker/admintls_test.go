package broker_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The admin listener serves HTTPS with a certificate; a read-only token
// reads everything and changes nothing, the full token does both.
func TestAdminTLSAndReadOnlyToken(t *testing.T) {
	t.Parallel()
	cert, key := bt.SelfSigned(t, t.TempDir())
	b := bt.Start(t, "", func(o *broker.Options) {
		fast(o)
		o.Admin, o.AdminToken, o.AdminReadToken = "127.0.0.1:0", "full", "look"
		o.AdminTLSCert, o.AdminTLSKey = cert, key
	})
	pemBytes, _ := os.ReadFile(cert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	client := &http.Client{Timeout: bt.Wait, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	call := func(method, path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "https://"+b.AdminAddr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(broker.AdminHeader, "test")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/api/v1/queues", "look", 200},
		{"GET", "/api/v1/stats", "look", 200},
		{"POST", "/api/v1/queues/q/pause", "look", 403},
		{"POST", "/api/v1/compact", "look", 403},
		{"DELETE", "/api/v1/jobs/x", "look", 403},
		{"POST", "/api/v1/queues/q/pause", "full", 200},
		{"GET", "/api/v1/queues", "nope", 401},
	} {
		if got := call(c.method, c.path, c.token); got != c.want {
			t.Errorf("%s %s with %q: %d, want %d", c.method, c.path, c.token, got, c.want)
		}
	}
	if q := queueInfo(t, b, "q"); !q.Paused {
		t.Fatalf("the full token's pause did not land: %+v", q)
	}
	o := broker.DefaultOptions()
	o.DataDir = t.TempDir()
	for _, c := range []struct {
		edit func(*broker.Options)
		want string
	}{
		{func(o *broker.Options) { o.AdminTLSCert = cert }, "admin-tls-key"},
		{func(o *broker.Options) { o.AdminToken, o.AdminReadToken = "same", "same" }, "admin-read-token"},
	} {
		oc := o
		c.edit(&oc)
		if err := oc.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("options: %v, want an error naming %s", err, c.want)
		}
	}
	bad := broker.DefaultOptions()
	bad.DataDir, bad.Admin = t.TempDir(), "127.0.0.1:0"
	bad.Frontend, bad.Backend, bad.PublisherIncoming, bad.PublisherOutgoing = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "", ""
	bad.AdminTLSCert, bad.AdminTLSKey = key, cert // swapped
	nb, err := broker.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "admin-tls-cert") {
		t.Fatalf("a bad certificate: %v, want an error naming admin-tls-cert", err)
	}
}
