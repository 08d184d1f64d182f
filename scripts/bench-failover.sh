#!/usr/bin/env bash
# A group's failover with a backlog (issue 34): JOBS jobs (default
# 1,000,000, 100-byte payloads) stored in its journal on a 3-member
# etcd (etcd-cluster.sh), a leader and a standby. The leader is
# SIGKILLed; the script times, from the kill, the standby's election
# (the dead leader's lease runs out: --leader-ttl, 2 s), its serving
# (from the copy of the journal it kept as a standby, or the journal read
# from etcd with BROKER_ARGS=--cold-standby) and the first job it ACKs.
# ROUNDS rounds (default 3); the killed broker comes back as the standby.
# The backlog is made by emq bench --preload on its own broker, backed
# up, and restored into etcd (emq restore), which the script times too.
#
#   BIN=bin/emq  JOBS=1000000  ROUNDS=3  BROKER_ARGS=
set -euo pipefail
BIN=${BIN:-bin/emq}
JOBS=${JOBS:-1000000}
ROUNDS=${ROUNDS:-3}

dir=$(mktemp -d "${TMPDIR:-/tmp}/emq-bench-failover.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

. "$(dirname "$0")/etcd-cluster.sh"

echo "failover: making a backlog of $JOBS jobs" >&2
"$BIN" bench --preload "$JOBS" --jobs 200000 --backup "$dir/backlog.emqbackup" --backup-after 2s --quiet --json >/dev/null
t0=$(now)
restored=$("$BIN" restore --etcd-endpoints "$endpoints" --from "$dir/backlog.emqbackup")
t1=$(now)
printf 'restore\t%s s: %s\n' "$(secs "$t1" "$t0")" "${restored#*: }"

declare -A pid
start() { # name n: broker n of the group (frontend 2469n, admin 2479n)
	"$BIN" broker --etcd-endpoints "$endpoints" --etcd-name "$1" \
		--frontend "tcp://127.0.0.1:2469$2" --backend "tcp://127.0.0.1:2468$2" --admin "127.0.0.1:2479$2" \
		--publisher-incoming "" --publisher-outgoing "" --log-level info ${BROKER_ARGS:-} >>"$dir/$1.log" 2>&1 &
	pid[$1]=$!
	pids+=($!)
}
waitlog() { # name pattern: until the broker's log has it (since its last start)
	until grep -q "$2" "$dir/$1.log"; do
		kill -0 "${pid[$1]}" 2>/dev/null || { tail "$dir/$1.log" >&2; exit 1; }
		sleep 0.05
	done
}

: >"$dir/a.log"
start a 1
waitlog a "leading: serving"
echo "failover: a leads: $(grep -o 'took=[^ ]*' "$dir/a.log" | tail -1)" >&2
leader=a lnum=1 standby=b snum=2
for round in $(seq 1 "$ROUNDS"); do
	: >"$dir/$standby.log"
	start "$standby" "$snum"
	waitlog "$standby" "standby: campaigning"
	case "${BROKER_ARGS:-}" in *--cold-standby*) ;; *) waitlog "$standby" "standby: holding a copy" ;; esac
	"$BIN" send --broker "tcp://127.0.0.1:2469$lnum" --queue failover --wait 10s x >/dev/null
	rss=$(awk '/VmRSS/ {printf "%.0f MiB", $2 / 1024}' "/proc/${pid[$standby]}/status")
	kill -9 "${pid[$leader]}"
	killed=$(now)
	until "$BIN" send --broker "tcp://127.0.0.1:2469$snum" --queue failover --wait 2s x >/dev/null 2>&1; do :; done
	acked=$(now)
	serving=$(grep -o 'took=[^ ]*' "$dir/$standby.log" | tail -1)
	printf 'round %d\tfirst ACK %s s after the SIGKILL (the new leader served %s after its election; standby RSS %s before)\n' \
		"$round" "$(secs "$acked" "$killed")" "${serving#took=}" "$rss"
	old=$leader onum=$lnum
	leader=$standby lnum=$snum standby=$old snum=$onum
done
