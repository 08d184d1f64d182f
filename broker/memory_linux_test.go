package broker

import "testing"

// A container's memory limit bounds the default receive buffer, not the
// host's memory; "max" and cgroup v1's huge count mean no limit.
func TestCgroupLimit(t *testing.T) {
	for text, want := range map[string]int64{"536870912\n": 512 << 20, "max\n": 0, "9223372036854771712\n": 0, "": 0} {
		if n, ok := cgroupLimit(text); n != want || ok != (want != 0) {
			t.Errorf("%q: %d %v, want %d", text, n, ok, want)
		}
	}
	if n := memoryLimit(); n <= 0 {
		t.Fatalf("memory limit %d", n)
	}
}
