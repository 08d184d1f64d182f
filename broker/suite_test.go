package broker_test

import (
	"fmt"
	"sort"
	"sync"
)

// suite gathers the reliability figures the tests report; TestMain prints
// them after the run.
var suite = &summary{n: map[string]int{}}

type summary struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *summary) add(what string, n int) {
	s.mu.Lock()
	s.n[what] += n
	s.mu.Unlock()
}

func (s *summary) print() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.n) == 0 {
		return
	}
	keys := make([]string, 0, len(s.n))
	for k := range s.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("SUMMARY %-45s %d\n", k, s.n[k])
	}
}
