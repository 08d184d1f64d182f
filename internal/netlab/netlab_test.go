package netlab_test

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/netlab"
	"github.com/eventmq/emq/internal/testutil"
)

// listenEnv makes the test binary a TCP server on the addresses it names.
const listenEnv = "NETLAB_TEST_LISTEN"

func TestMain(m *testing.M) {
	if addrs := os.Getenv(listenEnv); addrs != "" {
		for _, a := range []string{addrs + ":7001", addrs + ":7002"} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				os.Exit(2)
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Write([]byte("hi"))
					c.Close()
				}
			}()
		}
		select {}
	}
	os.Exit(m.Run())
}

// A node's server is reachable from the host; a cut stops it, silently
// (the dial times out, it is not refused); a cut of one port leaves the
// other; healing restores it.
func TestCutAndHeal(t *testing.T) {
	lab := netlab.New(t)
	n := lab.Node("server")
	cmd := n.Command(os.Args[0])
	cmd.Env = append(os.Environ(), listenEnv+"="+n.IP)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	reach := func(port int) error {
		c, err := net.DialTimeout("tcp", n.Addr(port), 300*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
	testutil.Eventually(t, "the node's server answering", func() bool { return reach(7001) == nil })
	must(t, lab.Cut(lab.Host(), n))
	if err := reach(7001); err == nil {
		t.Fatal("reached a node that is cut off")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a cut should be silence (a timeout), got %v", err)
	}
	must(t, lab.Heal(lab.Host(), n))
	if err := reach(7001); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	must(t, lab.CutPorts(lab.Host(), n, 7001))
	if reach(7001) == nil {
		t.Fatal("reached a port that is cut off")
	}
	if err := reach(7002); err != nil {
		t.Fatalf("the port not cut: %v", err)
	}
	must(t, lab.HealAll())
	if err := reach(7001); err != nil {
		t.Fatalf("after healing all: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
