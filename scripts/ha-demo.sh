#!/usr/bin/env bash
# ha-demo: a replicated EMQ on one machine. Three etcd members, two
# brokers on them (one leads, one stands by), a worker and a sender given
# both brokers' endpoints. While jobs flow, the leader is killed with
# SIGKILL; the standby takes over. Prints the failover time and what was
# lost (lost=0: every ACKed job ran).
#
#   make ha-demo            (BIN=bin/emq; JOBS, RATE, KILL_AFTER to change)
set -euo pipefail
BIN=${BIN:-bin/emq}
JOBS=${JOBS:-10000}
RATE=${RATE:-1000}
KILL_AFTER=${KILL_AFTER:-3}

dir=$(mktemp -d /tmp/emq-ha-demo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

# Three etcd members on loopback (fsync on, etcd's default; Debian's
# etcd-server, installed if missing).
ETCD_CLIENT=2437 ETCD_PEER=2438
. "$(dirname "$0")/etcd-cluster.sh"

# Two brokers of one group.
declare -A bpid admin
start_broker() { # name n
	"$BIN" broker --etcd-endpoints "$endpoints" --etcd-name "$1" \
		--frontend "tcp://127.0.0.1:2439$2" --backend "tcp://127.0.0.1:2440$2" --admin "127.0.0.1:2441$2" \
		--publisher-incoming "" --publisher-outgoing "" \
		--heartbeat-interval 250ms --heartbeat-timeout 2s --log-level warn >>"$dir/broker-$1.log" 2>&1 &
	bpid[$1]=$!
	admin[$1]="127.0.0.1:2441$2"
	pids+=($!)
}
start_broker a 1
start_broker b 2
role() { curl -fsS "http://${admin[$1]}/api/v1/stats" 2>/dev/null | grep -o '"role": *"[a-z]*"' | grep -o '[a-z]*"$' | tr -d '"'; }
leader=""
until [ -n "$leader" ]; do
	for n in a b; do [ "$(role $n)" = leader ] && curl -fsS "http://${admin[$n]}/readyz" >/dev/null 2>&1 && leader=$n; done
	sleep 0.1
done
standby=$([ "$leader" = a ] && echo b || echo a)
echo "brokers: $leader leads, $standby stands by"

# A sender and a worker on both brokers: emq bench counts what it ACKed
# and what ran.
echo "sending $JOBS jobs at $RATE a second; killing the leader after ${KILL_AFTER}s"
"$BIN" bench --frontend tcp://127.0.0.1:24391,tcp://127.0.0.1:24392 --backend tcp://127.0.0.1:24401,tcp://127.0.0.1:24402 \
	--senders 8 --window 1 --slots 16 --jobs "$JOBS" --rate "$RATE" --quiet --json >"$dir/bench.json" 2>"$dir/bench.log" &
bench=$!
sleep "$KILL_AFTER"
kill -9 "${bpid[$leader]}"
killed=$(date +%s%N)
wait "${bpid[$leader]}" 2>/dev/null || true
until curl -fsS "http://${admin[$standby]}/readyz" >/dev/null 2>&1; do sleep 0.02; done
ready=$(date +%s%N)
echo "SIGKILL to $leader; $standby serving after $(( (ready - killed) / 1000000 )) ms"
wait "$bench" || true
python3 - "$dir/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"jobs ACKed {r['jobs'] - r['errors']}, lost={r['lost']}, ran again (in flight at the kill) {r['duplicates']}, errors {r['errors']}")
sys.exit(1 if r['lost'] else 0)
PY
