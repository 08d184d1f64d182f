package group

import "fmt"

// Role is what a broker is in its group.
type Role uint8

const (
	RoleNone     Role = iota // not in a group: a broker on its own
	RoleStarting             // it has not reached etcd yet
	RoleStandby              // it campaigns, and serves no eMQP
	RoleLeader               // it serves the group's journal
)

var roleNames = [...]string{RoleNone: "", RoleStarting: "starting", RoleStandby: "standby", RoleLeader: "leader"}

// String is the role as the admin API and the logs name it.
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", r)
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Role) UnmarshalText(b []byte) error {
	for i, name := range roleNames {
		if string(b) == name {
			*r = Role(i)
			return nil
		}
	}
	return fmt.Errorf("group: unknown role %q", b)
}

// Info is a broker's place in its group.
type Info struct {
	Role      Role   `json:"role"`
	Name      string `json:"name"`   // this broker's name in the election
	Leader    string `json:"leader"` // the leader's name ("" while there is none)
	Elections int64  `json:"elections"`
}
