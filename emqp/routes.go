package emqp

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

// RouteTable says which shard serves which queue, when queues are spread
// over several broker groups (shards). It is the placement a broker
// answers ROUTES with, and what clients and workers route by.
//
// A queue named in Queues is served by that shard. Any other queue is
// served by one of the Hashed shards, by rendezvous hashing of the
// queue's name (Owner): the same table gives the same answer everywhere,
// and a shard added to Hashed takes about 1/N of the hashed queues from
// the others, leaving the rest where they are.
type RouteTable struct {
	Version int64                 `json:"version"`          // raised by every change
	Shards  map[string]ShardRoute `json:"shards"`           // by name
	Hashed  []string              `json:"hashed,omitempty"` // the shards queues not in Queues are spread over
	Queues  map[string]string     `json:"queues,omitempty"` // queue → shard, explicit
	// Moving lists the queues being moved between shards.
	Moving map[string]Move `json:"moving,omitempty"`
}

// Move is a queue on its way from one shard to another. Until Copied,
// the queue is still From's (Queues says so), and To holds what it is
// sent of it without dispatching any. First From goes on serving the
// queue while it copies its stored jobs to To; then, Held, neither shard
// takes the queue's new jobs (ERROR unavailable, which clients retry)
// nor dispatches any, while From sends what changed since it began. The
// change that sets Copied also places the queue on To, which then serves
// it; From dispatches none of what it still holds of the queue, deletes
// it, and ends the move.
type Move struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Held   bool   `json:"held,omitempty"`
	Copied bool   `json:"copied,omitempty"`
}

// ShardRoute is where a shard's brokers listen. Clients dial every
// Frontend endpoint and workers every Backend one, and follow the leader
// (the one that answers), as with any replicated group.
type ShardRoute struct {
	Frontend []string `json:"frontend"`
	Backend  []string `json:"backend"`
	Admin    []string `json:"admin,omitempty"` // admin HTTP host:port, for the admin tools
}

// ValidShardName reports whether name can name a shard: 1 to 64 letters,
// digits, '-', '_' or '.'.
func ValidShardName(name string) bool { return shardName.MatchString(name) }

var shardName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Owner is the shard that serves queue: its entry in Queues, else the
// Hashed shard whose hash with the name is highest; "" when the table
// names no shard for it.
func (t *RouteTable) Owner(queue string) string {
	if t == nil {
		return ""
	}
	if s, ok := t.Queues[queue]; ok {
		return s
	}
	best, bestHash := "", uint64(0)
	for _, s := range t.Hashed {
		h := fnv.New64a()
		h.Write([]byte(s))
		h.Write([]byte{0})
		h.Write([]byte(queue))
		if x := mix(h.Sum64()); best == "" || x > bestHash || (x == bestHash && s < best) {
			best, bestHash = s, x
		}
	}
	return best
}

// mix spreads every bit of x over all of the result (MurmurHash3's
// finalizer): FNV alone leaves the top bits of short, similar strings
// alike, which skews rendezvous hashing.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Check reports the first thing wrong with the table: a shard with a bad
// name or no endpoints, or a queue or hash entry naming a shard it does
// not list.
func (t *RouteTable) Check() error {
	for name, s := range t.Shards {
		switch {
		case !ValidShardName(name):
			return fmt.Errorf("shard %q: a name is 1 to 64 letters, digits, '-', '_' or '.'", name)
		case len(s.Frontend) == 0 || len(s.Backend) == 0:
			return fmt.Errorf("shard %s: needs its frontend and backend endpoints", name)
		}
		for _, ep := range append(append([]string{}, s.Frontend...), s.Backend...) {
			if ep == "" || strings.ContainsAny(ep, ", ") {
				return fmt.Errorf("shard %s: endpoint %q: want one tcp://host:port, without spaces or commas", name, ep)
			}
		}
	}
	for _, s := range t.Hashed {
		if _, ok := t.Shards[s]; !ok {
			return fmt.Errorf("hashed shard %s is not a listed shard", s)
		}
	}
	for q, s := range t.Queues {
		if _, ok := t.Shards[s]; !ok {
			return fmt.Errorf("queue %s is placed on shard %s, which is not listed", q, s)
		}
	}
	for q, m := range t.Moving {
		for _, s := range []string{m.From, m.To} {
			if _, ok := t.Shards[s]; !ok {
				return fmt.Errorf("queue %s is moving between shards %s and %s; %s is not listed", q, m.From, m.To, s)
			}
		}
		if m.From == m.To {
			return fmt.Errorf("queue %s is moving from shard %s to itself", q, m.From)
		}
	}
	return nil
}

// ParseRouteTable decodes a ROUTES answer; an empty table ("{}") is a
// broker that is not one shard of several.
func ParseRouteTable(b []byte) (*RouteTable, error) {
	var t RouteTable
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	return &t, nil
}

// MovedText is the text of ERROR moved: queue is served by shard, whose
// endpoints are given, as of placement version.
func MovedText(queue, shard string, endpoints []string, version int64) string {
	return fmt.Sprintf("queue %q is served by shard %s at %s (placement %d)", queue, shard, strings.Join(endpoints, ","), version)
}

var movedText = regexp.MustCompile(`is served by shard ([A-Za-z0-9_.-]{1,64}) at ([^ ]+) \(placement ([0-9]+)\)$`)

// Moved is what the text of ERROR moved says.
type Moved struct {
	Shard     string
	Endpoints []string
	Version   int64
}

// ParseMoved reads the text of ERROR moved (MovedText).
func ParseMoved(text string) (Moved, bool) {
	m := movedText.FindStringSubmatch(text)
	if m == nil {
		return Moved{}, false
	}
	v, err := strconv.ParseInt(m[3], 10, 64)
	if err != nil {
		return Moved{}, false
	}
	return Moved{Shard: m[1], Endpoints: strings.Split(m[2], ","), Version: v}, true
}
