package grouptest_test

import (
	"testing"

	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/grouptest"
)

// A member closed and started again comes back on the same ports and
// stands by; Leader names the one that leads, and Role says each one's.
func TestMemberRestartsAndStandsBy(t *testing.T) {
	c := grouptest.Start(t, 2)
	leader := c.Leader(t)
	standby := c.Standbys(leader)[0]
	if standby.Role() != group.RoleStandby || standby.Leading() || !leader.Leading() {
		t.Fatalf("roles: %s %q, %s %q", leader.Name, leader.Role(), standby.Name, standby.Role())
	}
	front, admin := standby.Frontend, standby.AdminAddr()
	standby.Close(t)
	if standby.Running() || standby.Role() != group.RoleNone {
		t.Fatalf("a closed member: running %v, role %q", standby.Running(), standby.Role())
	}
	standby.Start(t)
	if c.Leader(t) != leader {
		t.Fatal("the leader changed when a standby restarted")
	}
	if standby.Frontend != front || standby.AdminAddr() != admin {
		t.Fatal("a restarted member changed ports")
	}
	standby.WaitRole(t, group.RoleStandby)
}
