package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/eventmq/emq/internal/testutil"
)

// MemberEnv, in a test binary's environment, makes RunMemberIfAsked run
// one etcd member, as the JSON of a memberConfig says, instead of tests.
const MemberEnv = "EMQ_TEST_ETCD_MEMBER"

type memberConfig struct {
	Name, Dir, Peer, Client, Cluster string
}

// RunMemberIfAsked runs an etcd member and exits when MemberEnv is set:
// call it first in TestMain. The member stops on SIGTERM.
func RunMemberIfAsked() {
	v := os.Getenv(MemberEnv)
	if v == "" {
		return
	}
	var mc memberConfig
	if err := json.Unmarshal([]byte(v), &mc); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", MemberEnv, err)
		os.Exit(2)
	}
	peer, err1 := url.Parse(mc.Peer)
	client, err2 := url.Parse(mc.Client)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "%s: bad URL: %v %v\n", MemberEnv, err1, err2)
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = mc.Name, mc.Dir
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(mc.Dir, "etcd.log")}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster, cfg.InitialClusterToken = mc.Cluster, "emq-test"
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd member %s: %v\n", mc.Name, err)
		os.Exit(1)
	}
	select {
	case <-stop:
		e.Close()
		os.Exit(0)
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd member %s: %v\n", mc.Name, err)
		os.Exit(1)
	}
}

// Procs is an etcd cluster whose members are processes of their own
// (this test binary, as RunMemberIfAsked runs it), so a test can pause
// one (SIGSTOP) or place each in its own network namespace.
type Procs struct {
	t       testing.TB
	mu      sync.Mutex
	cmds    []*exec.Cmd
	clients []string
}

// StartProcs runs a member on each of hosts (IP addresses), on ports
// 2379 (clients) and 2380 (peers); command makes the process of member
// i from a program and its arguments (exec.Command, or a namespace's).
// It returns once every member answers; members are stopped at cleanup.
func StartProcs(t testing.TB, hosts []string, command func(i int, name string, args ...string) *exec.Cmd) *Procs {
	t.Helper()
	skipShort(t)
	p := &Procs{t: t, cmds: make([]*exec.Cmd, len(hosts))}
	var initial []string
	for i, h := range hosts {
		initial = append(initial, fmt.Sprintf("m%d=http://%s:2380", i, h))
		p.clients = append(p.clients, fmt.Sprintf("http://%s:2379", h))
	}
	dirs := make([]string, len(hosts))
	for i := range dirs {
		dirs[i] = t.TempDir() // before the cleanup that stops members: removed after it
	}
	t.Cleanup(p.stop)
	for i, h := range hosts {
		mc, _ := json.Marshal(memberConfig{Name: fmt.Sprintf("m%d", i), Dir: dirs[i],
			Peer: fmt.Sprintf("http://%s:2380", h), Client: p.clients[i], Cluster: strings.Join(initial, ",")})
		cmd := command(i, os.Args[0])
		cmd.Env = append(os.Environ(), MemberEnv+"="+string(mc))
		cmd.Stderr = os.Stderr
		testutil.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatalf("etcd member %d: %v", i, err)
		}
		p.cmds[i] = cmd
	}
	testutil.EventuallyWithin(t, time.Minute, "every etcd member answering", func() bool {
		_, err := p.Leader()
		return err == nil
	})
	return p
}

// Endpoints are the members' client URLs.
func (p *Procs) Endpoints() []string { return append([]string(nil), p.clients...) }

// Signal sends sig to member i.
func (p *Procs) Signal(i int, sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cmds[i]; c != nil {
		c.Process.Signal(sig)
	}
}

// Leader is the index of the member every member names as leader; an
// error when one does not answer or they disagree.
func (p *Procs) Leader() (int, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.clients, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1, err
	}
	defer cli.Close()
	ids := make([]uint64, len(p.clients))
	var leader uint64
	for i, ep := range p.clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			return -1, fmt.Errorf("member %d: %w", i, err)
		}
		if leader != 0 && st.Leader != leader || st.Leader == 0 {
			return -1, fmt.Errorf("members disagree on their leader")
		}
		leader, ids[i] = st.Leader, st.Header.MemberId
	}
	for i, id := range ids {
		if id == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the leader is not a member")
}

func (p *Procs) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.cmds {
		if c == nil {
			continue
		}
		c.Process.Signal(syscall.SIGCONT) // a paused member cannot stop
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-done
		}
		p.cmds[i] = nil
	}
}
