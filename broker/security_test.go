package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/worker"
)

// keys is a CURVE key pair, Z85.
type keys struct{ pub, secret string }

func newKeys(t *testing.T) keys {
	t.Helper()
	pub, secret, err := zmtp.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return keys{pub.String(), secret.String()}
}

// securedBroker runs a broker with CURVE (its key, and clients listed
// with their roles) and PLAIN users (name -> "password roles").
type securedBroker struct {
	*bt.Broker
	server  keys
	clients string // the curve-clients file
	users   string // the plain-users file
}

func startSecured(t *testing.T, curve map[keys]string, plain map[string][2]string) *securedBroker {
	t.Helper()
	dir := t.TempDir()
	sb := &securedBroker{server: newKeys(t), clients: filepath.Join(dir, "clients"), users: filepath.Join(dir, "users")}
	writeClients(t, sb.clients, curve)
	var users strings.Builder
	users.WriteString("# PLAIN users\n")
	for name, pr := range plain {
		hash, err := bcrypt.GenerateFromPassword([]byte(pr[0]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&users, "%s:%s:%s\n", name, hash, pr[1])
	}
	if err := os.WriteFile(sb.users, []byte(users.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "broker.key")
	if err := os.WriteFile(secretFile, []byte(sb.server.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb.Broker = bt.Start(t, "", func(o *broker.Options) {
		fast(o)
		o.CurveSecretKeyFile, o.CurveClients, o.PlainUsers = secretFile, sb.clients, sb.users
	})
	return sb
}

func writeClients(t *testing.T, path string, curve map[keys]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# CURVE clients: KEY ROLES\n\n")
	for k, roles := range curve {
		fmt.Fprintf(&b, "%s %s  # a comment\n", k.pub, roles)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (sb *securedBroker) curve(k keys) client.Security {
	return client.Security{ServerKey: sb.server.pub, SecretKey: k.secret}
}

// securePeer dials endpoint with sec and sends and reads eMQP messages.
func securePeer(t *testing.T, endpoint, id string, sec client.Security) (*zmtp.Conn, error) {
	t.Helper()
	cs, err := sec.Dial()
	if err != nil {
		t.Fatal(err)
	}
	c, err := zmtp.Dial(context.Background(), endpoint, zmtp.DialOptions{Identity: []byte(id), Security: cs, Timeout: 2 * time.Second})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func roundTrip(t *testing.T, c *zmtp.Conn, m emqp.Message) emqp.Message {
	t.Helper()
	if err := c.WriteMsgs(emqp.Encode(m)); err != nil {
		t.Fatal(err)
	}
	for {
		_ = c.SetReadDeadline(time.Now().Add(bt.Wait))
		frames, err := c.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		got, err := emqp.Decode(frames)
		if err != nil {
			t.Fatal(err)
		}
		if _, beat := got.(*emqp.Heartbeat); !beat {
			return got
		}
	}
}

func TestCurveClientsAndWorkers(t *testing.T) {
	t.Parallel()
	cli, wrk, both := newKeys(t), newKeys(t), newKeys(t)
	for !strings.Contains(cli.pub, "#") { // a # in a key is no comment
		cli = newKeys(t)
	}
	sb := startSecured(t, map[keys]string{cli: "client", wrk: "worker", both: "client,worker"}, nil)

	// A client and a worker of the Go packages, by CURVE.
	w, err := worker.New(worker.Options{Broker: sb.Backend(), HeartbeatInterval: 50 * time.Millisecond, Security: sb.curve(wrk), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("q", func(_ context.Context, j *worker.Job) ([]byte, error) {
		return append([]byte("done: "), j.Payload...), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	c, err := client.New(client.Options{Broker: sb.Frontend(), Security: sb.curve(cli), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reply, err := c.Request(ctx, "q", []byte("hello"))
	if err != nil || string(reply) != "done: hello" {
		t.Fatalf("request: %q %v", reply, err)
	}

	// Roles: the client's key may not INFORM, the worker's may not REQUEST.
	asClient, err := securePeer(t, sb.Backend(), "sneaky-worker", sb.curve(cli))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := roundTrip(t, asClient, &emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "q"}}, PeerType: emqp.PeerWorker}).(*emqp.Error); !ok || e.Code != emqp.CodeForbidden {
		t.Fatalf("INFORM with a client key: %+v, want ERROR forbidden", e)
	}
	asWorker, err := securePeer(t, sb.Frontend(), "sneaky-client", sb.curve(wrk))
	if err != nil {
		t.Fatal(err)
	}
	id := emqp.NewID()
	if e, ok := roundTrip(t, asWorker, &emqp.Request{MsgID: id, Queue: "stolen", Payload: []byte("x")}).(*emqp.Error); !ok || e.Code != emqp.CodeForbidden || e.RefMsgID != id {
		t.Fatalf("REQUEST with a worker key: %+v, want ERROR forbidden", e)
	}
	if code := stored(t, sb.Broker, "stolen"); code != 0 {
		t.Fatalf("the forbidden REQUEST stored %d jobs", code)
	}
	workers, _ := sb.Workers(context.Background())
	for _, wi := range workers {
		if wi.ID == "sneaky-worker" {
			t.Fatal("the forbidden INFORM made a worker")
		}
	}
	if n := sb.Stats().Errors(emqp.CodeForbidden); n != 2 {
		t.Fatalf("forbidden counted %d times, want 2", n)
	}
	// A key with both roles does both.
	asBoth, err := securePeer(t, sb.Frontend(), "both", sb.curve(both))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := roundTrip(t, asBoth, &emqp.Request{MsgID: emqp.NewID(), Queue: "q2", Payload: []byte("x")}).(*emqp.Ack); !ok {
		t.Fatal("a client,worker key cannot REQUEST")
	}

	// A client with an unlisted key learns so from Send.
	stranger, err := client.New(client.Options{Broker: sb.Frontend(), Security: sb.curve(newKeys(t)), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	sctx, scancel := context.WithTimeout(ctx, bt.Wait)
	defer scancel()
	if _, err := stranger.Send(sctx, "q", []byte("x")); !errors.Is(err, client.ErrRefused) {
		t.Errorf("Send with an unlisted key: %v, want ErrRefused", err)
	}

	// Refused in the handshake: an unlisted key, the wrong server key, NULL.
	if _, err := securePeer(t, sb.Frontend(), "", sb.curve(newKeys(t))); !errors.Is(err, zmtp.ErrRefused) {
		t.Errorf("an unlisted key: %v, want refused", err)
	}
	wrongServer := client.Security{ServerKey: newKeys(t).pub, SecretKey: cli.secret}
	if _, err := securePeer(t, sb.Frontend(), "", wrongServer); err == nil {
		t.Error("the wrong server key got through")
	}
	if _, err := securePeer(t, sb.Frontend(), "", client.Security{}); err == nil {
		t.Error("a NULL peer got through")
	}

	// SIGHUP's reload: the client's key removed is disconnected and
	// cannot connect again; the worker's, kept as it was, stays.
	writeClients(t, sb.clients, map[keys]string{wrk: "worker"})
	if err := sb.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]*zmtp.Conn{"client,worker": asBoth, "client": asClient} {
		_ = conn.SetReadDeadline(time.Now().Add(bt.Wait))
		for {
			_, err := conn.ReadMsg()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the %s key removed: its connection still open", name)
			}
			if err != nil {
				break // closed by the reload
			}
		}
	}
	if _, err := securePeer(t, sb.Frontend(), "", sb.curve(cli)); !errors.Is(err, zmtp.ErrRefused) {
		t.Errorf("a removed key after the reload: %v, want refused", err)
	}
	// A bad file keeps the old peers.
	if err := os.WriteFile(sb.clients, []byte("not-a-key client\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.ReloadCredentials(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a bad clients file: %v, want an error naming the line", err)
	}
	if _, err := securePeer(t, sb.Backend(), "w2", sb.curve(wrk)); err != nil {
		t.Errorf("after a bad reload the worker's key is refused: %v", err)
	}
	cancel()
	testutil.Recv(t, wdone, "the worker's end")
}

// stored counts the jobs of queue in the journal.
func stored(t *testing.T, b *bt.Broker, queue string) int {
	t.Helper()
	qs, err := b.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == queue {
			return q.Pending + q.Delayed + q.InFlight
		}
	}
	return 0
}

func TestPlainUsers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 72) // bcrypt's most
	sb := startSecured(t, map[keys]string{}, map[string][2]string{"app": {"app-pass", "client"}, "runner": {"run-pass", "worker"}, "long": {long, "client"}})
	if _, err := securePeer(t, sb.Frontend(), "", client.Security{User: "long", Password: long}); err != nil {
		t.Fatalf("a 72-byte password: %v", err)
	}
	if _, err := securePeer(t, sb.Frontend(), "", client.Security{User: "long", Password: long + "extra"}); !errors.Is(err, zmtp.ErrRefused) {
		t.Errorf("a password past bcrypt's 72 bytes that starts with the right one: %v, want refused", err)
	}
	ok, err := securePeer(t, sb.Frontend(), "app", client.Security{User: "app", Password: "app-pass"})
	if err != nil {
		t.Fatal(err)
	}
	if _, isAck := roundTrip(t, ok, &emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("x")}).(*emqp.Ack); !isAck {
		t.Fatal("PLAIN client cannot REQUEST")
	}
	for _, bad := range []client.Security{{User: "app", Password: "wrong"}, {User: "nobody", Password: "app-pass"}} {
		if _, err := securePeer(t, sb.Frontend(), "", bad); !errors.Is(err, zmtp.ErrRefused) {
			t.Errorf("%s/%s: %v, want refused", bad.User, bad.Password, err)
		}
	}
	// A new password for app ends the connection made with the old one.
	hash, err := bcrypt.GenerateFromPassword([]byte("new-pass"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(sb.users)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(old), "\n") {
		if !strings.HasPrefix(line, "app:") {
			kept = append(kept, line)
		}
	}
	kept = append(kept, "app:"+string(hash)+":client")
	if err := os.WriteFile(sb.users, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	_ = ok.SetReadDeadline(time.Now().Add(bt.Wait))
	for {
		_, err := ok.ReadMsg()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("app's connection by its old password still open after the reload")
		}
		if err != nil {
			break
		}
	}
	if _, err := securePeer(t, sb.Frontend(), "app", client.Security{User: "app", Password: "new-pass"}); err != nil {
		t.Fatalf("the new password: %v", err)
	}
	runner, err := securePeer(t, sb.Frontend(), "runner", client.Security{User: "runner", Password: "run-pass"})
	if err != nil {
		t.Fatal(err)
	}
	if e, isErr := roundTrip(t, runner, &emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("x")}).(*emqp.Error); !isErr || e.Code != emqp.CodeForbidden {
		t.Fatalf("PLAIN worker's REQUEST: %+v, want forbidden", e)
	}
}

// Libzmq peers (python3-zmq) by CURVE and PLAIN: a client gets its ACK,
// an unlisted key and a wrong password get nothing.
func TestSecuredLibzmqPeers(t *testing.T) {
	t.Parallel()
	python := pythonCurve(t)
	cli := newKeys(t)
	sb := startSecured(t, map[keys]string{cli: "client"}, map[string][2]string{"app": {"app-pass", "client"}})
	run := func(args ...string) string {
		out, err := exec.Command(python, append([]string{"testdata/interop_secured.py", sb.Frontend()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("interop_secured.py %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("curve", sb.server.pub, cli.pub, cli.secret); got != "ACK" {
		t.Errorf("libzmq CURVE client: %s", got)
	}
	if got := run("plain", "app", "app-pass"); got != "ACK" {
		t.Errorf("libzmq PLAIN client: %s", got)
	}
	other := newKeys(t)
	if got := run("curve", sb.server.pub, other.pub, other.secret); got != "no answer" {
		t.Errorf("libzmq client with an unlisted key: %s", got)
	}
	if got := run("plain", "app", "guess"); got != "no answer" {
		t.Errorf("libzmq client with a wrong password: %s", got)
	}
	if got := run("null"); got != "no answer" {
		t.Errorf("libzmq NULL client: %s", got)
	}
}

// A libzmq worker (python3-zmq) with a CURVE key runs a job a Go client
// sends by CURVE.
func TestSecuredLibzmqWorker(t *testing.T) {
	t.Parallel()
	python := pythonCurve(t)
	cli, wrk := newKeys(t), newKeys(t)
	sb := startSecured(t, map[keys]string{cli: "client", wrk: "worker"}, nil)
	cmd := exec.Command(python, "testdata/interop_secured_worker.py", sb.Backend(), sb.server.pub, wrk.pub, wrk.secret)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{Broker: sb.Frontend(), Security: sb.curve(cli), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	reply, err := c.Request(ctx, "secured", []byte("from go"))
	if werr := cmd.Wait(); werr != nil || strings.TrimSpace(out.String()) != "DONE" {
		t.Fatalf("libzmq worker: %v\n%s", werr, out.String())
	}
	if err != nil || string(reply) != "FROM GO" {
		t.Fatalf("reply %q, %v", reply, err)
	}
}

// Subscribers by CURVE: a key with the subscriber role receives what a
// client publishes; a key without it is refused at the PUB endpoint.
func TestCurveSubscribers(t *testing.T) {
	t.Parallel()
	pub, sub, cli := newKeys(t), newKeys(t), newKeys(t)
	sb := startSecured(t, map[keys]string{pub: "client", sub: "subscriber", cli: "client,worker"}, nil)
	s, err := client.Subscribe(client.SubscriberOptions{Endpoint: sb.PublisherOutgoing(), Security: sb.curve(sub), Logger: bt.Logger(t)}, "news.")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := client.New(client.Options{Broker: sb.Frontend(), Security: sb.curve(pub), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	got := make(chan client.Message, 1)
	go func() {
		if m, err := s.Recv(ctx); err == nil {
			got <- m
		}
	}()
	for { // published until the subscription has reached the broker
		if err := c.Publish(ctx, "news.today", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.Topic != "news.today" || string(m.Payload) != "hello" {
				t.Fatalf("got %+v", m)
			}
		case <-time.After(50 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatal("the subscriber got nothing")
		}
		break
	}
	if _, err := securePeer(t, sb.PublisherOutgoing(), "", sb.curve(cli)); !errors.Is(err, zmtp.ErrRefused) {
		t.Errorf("a key without the subscriber role at the PUB endpoint: %v, want refused", err)
	}
	// The subscriber's key removed: it is disconnected, and stays out.
	writeClients(t, sb.clients, map[keys]string{pub: "client", cli: "client,worker"})
	if err := sb.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, "the removed subscriber gone", func() bool { return sb.PubSub().Subscribers == 0 })
}

// pythonCurve is the python3 with a CURVE-capable zmq, or a skip
// (a failure with EMQ_REQUIRE_INTEROP).
func pythonCurve(t *testing.T) string {
	t.Helper()
	return testutil.Python(t, true)
}

func TestAnonymousNeedsSaying(t *testing.T) {
	t.Parallel()
	o := broker.DefaultOptions()
	o.Frontend = "tcp://0.0.0.0:47290"
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "allow-anonymous") || !strings.Contains(err.Error(), "curve-secret-key-file") {
		t.Fatalf("a non-loopback frontend without CURVE or PLAIN: %v", err)
	}
	o.AllowAnonymous = true
	if err := o.Validate(); err != nil {
		t.Fatalf("with allow-anonymous: %v", err)
	}
	o.AllowAnonymous, o.CurveSecretKeyFile = false, "x.key"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("a secret key without clients: %v", err)
	}
	o.CurveSecretKeyFile, o.CurveClients = "broker.pub", "clients"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "public key file") {
		t.Fatalf("a public key file as the secret key: %v", err)
	}
}

// Wrong PLAIN passwords from one address: after MaxGuesses, even the
// right one is refused there, without a check, for GuessWindow.
func TestPlainGuessesSlowed(t *testing.T) {
	t.Parallel()
	sb := startSecured(t, map[keys]string{}, map[string][2]string{"app": {"app-pass", "client"}})
	for range broker.MaxGuesses {
		if _, err := securePeer(t, sb.Frontend(), "", client.Security{User: "app", Password: "guess"}); !errors.Is(err, zmtp.ErrRefused) {
			t.Fatalf("a wrong password: %v", err)
		}
	}
	_, err := securePeer(t, sb.Frontend(), "", client.Security{User: "app", Password: "app-pass"})
	if !errors.Is(err, zmtp.ErrRefused) || !strings.Contains(err.Error(), "wrong passwords from 127.0.0.1") {
		t.Fatalf("the right password after %d wrong ones: %v, want refused for a while", broker.MaxGuesses, err)
	}
}
