#!/usr/bin/env bash
# EMQ on a 3-member etcd, the runs make bench sets beside JetStream R3
# (issue 34): three members of Debian's etcd-server on loopback (fsync
# on, etcd's default), one broker of a group on them, and emq bench
# --ack-only against it at 1:1, 4:4, 16:16 with one job in flight a
# sender, and 16:16 with 32. Around each run it reads etcd's own counters
# (etcd_mvcc_put_total, _delete_total, _range_total of member 1: every
# member applies every operation) and adds to the run's JSON
# etcd_ops_per_job, the puts, deletes and reads a job cost.
#
# Prints one run a line, KIND<TAB>LABEL<TAB>JSON (KIND etcd-ack or
# etcd-w32; internal/benchtable reads them). It installs etcd-server and
# etcd-client with apt-get when they are missing.
#
#   BIN=bin/emq  N=10000 jobs a run  REPEAT=2  CONFIGS="1:1 4:4 16:16"  W32=1  N32=4×N
#   BROKER_ARGS="--etcd-pipeline 1"  (more flags for the broker)
set -euo pipefail
BIN=${BIN:-bin/emq}
N=${N:-10000}
REPEAT=${REPEAT:-2}
CONFIGS=${CONFIGS:-"1:1 4:4 16:16"}
W32=${W32:-1}
# At window 32 a run of 10,000 jobs lasts about a second, a tenth of it
# filling and draining the 512 jobs in flight: its runs take N32 jobs.
N32=${N32:-$((4 * N))}

dir=$(mktemp -d "${TMPDIR:-/tmp}/emq-bench-etcd.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

. "$(dirname "$0")/etcd-cluster.sh"

admin=127.0.0.1:24599
"$BIN" broker --etcd-endpoints "$endpoints" --etcd-name bench \
	--frontend tcp://127.0.0.1:24591 --backend tcp://127.0.0.1:24592 --admin "$admin" \
	--publisher-incoming "" --publisher-outgoing "" --log-level warn ${BROKER_ARGS:-} >"$dir/broker.log" 2>&1 &
pids+=($!)
until curl -fsS "http://$admin/readyz" >/dev/null 2>&1; do
	kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/broker.log" >&2; exit 1; }
	sleep 0.1
done

ops() { # puts + deletes + ranges member 1 has applied
	curl -fsS http://127.0.0.1:24571/metrics |
		awk '/^etcd_mvcc_(put|delete|range)_total / {s += $2} END {printf "%.0f\n", s}'
}

settled() { # waits (up to 5 s) until the broker's writes stop: its last Completes may wait for company
	local last now i
	last=$(curl -fsS http://127.0.0.1:24571/metrics | awk '/^etcd_mvcc_(put|delete)_total / {s += $2} END {print s}')
	for ((i = 0; i < 25; i++)); do
		sleep 0.2
		now=$(curl -fsS http://127.0.0.1:24571/metrics | awk '/^etcd_mvcc_(put|delete)_total / {s += $2} END {print s}')
		[ "$now" = "$last" ] && return
		last=$now
	done
}

run() { # kind, label, then emq bench flags
	local kind=$1 label=$2 before after json
	shift 2
	echo "emq bench (etcd) $*" >&2
	before=$(ops)
	if json=$("$BIN" bench --frontend tcp://127.0.0.1:24591 --backend tcp://127.0.0.1:24592 --quiet --json "$@") && [ -n "$json" ]; then
		settled
		after=$(ops)
		printf '%s\t%s\t%s\n' "$kind" "$label" "$(python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r["etcd_ops_per_job"] = (int(sys.argv[2]) - int(sys.argv[3])) / max(r["jobs"], 1)
print(json.dumps(r))' "$json" "$after" "$before")"
	else
		echo "emq bench (etcd) $* failed; its row is left out" >&2
	fi
}

for pc in $CONFIGS; do
	for ((i = 0; i < REPEAT; i++)); do
		run etcd-ack "$pc" --senders "${pc%:*}" --slots "${pc#*:}" --window 1 --jobs "$N" --ack-only
	done
done
if [ "$W32" = 1 ]; then
	for ((i = 0; i < REPEAT; i++)); do
		run etcd-w32 16:16 --senders 16 --slots 16 --window 32 --jobs "$N32" --ack-only
	done
fi
