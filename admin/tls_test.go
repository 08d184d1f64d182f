package admin_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The admin listener serves HTTPS with a certificate; a read-only token
// reads everything and changes nothing, the full token does both.
func TestAdminTLSAndReadOnlyToken(t *testing.T) {
	t.Parallel()
	cert, key := bt.SelfSigned(t, t.TempDir())
	b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) {
		o.Token, o.ReadToken = "full", "look"
		o.TLSCert, o.TLSKey = cert, key
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
		req.Header.Set(admin.Header, "test")
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
	if q := bt.QueueInfo(t, b, "q"); !q.Paused {
		t.Fatalf("the full token's pause did not land: %+v", q)
	}
	o := admin.DefaultOptions()
	for _, c := range []struct {
		edit func(*admin.Options)
		want string
	}{
		{func(o *admin.Options) { o.TLSCert = cert }, "admin-tls-key"},
		{func(o *admin.Options) { o.Token, o.ReadToken = "same", "same" }, "admin-read-token"},
	} {
		oc := o
		c.edit(&oc)
		if err := oc.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("options: %v, want an error naming %s", err, c.want)
		}
	}
	bad := admin.DefaultOptions()
	bad.Addr = "127.0.0.1:0"
	bad.TLSCert, bad.TLSKey = key, cert // swapped
	srv, err := admin.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err == nil || !strings.Contains(err.Error(), "admin-tls-cert") {
		srv.Close()
		t.Fatalf("a bad certificate: %v, want an error naming admin-tls-cert", err)
	}
}
