#!/usr/bin/env bash
# Aggregate throughput of EMQ shards, each shard a group on its OWN
# 3-member etcd (etcd-cluster.sh, Debian's etcd on loopback, fsync on),
# one broker a shard (no standby). For each S in SHARDS it starts S etcd
# clusters and, after listing the S shards in the placement (kept on
# shard 1's etcd; the other shards' brokers get --placement-endpoints, and
# every shard its --shard-etcd), S brokers, places queue qK on shard sK,
# and then runs S emq bench --ack-only AT ONCE, bench K against shard K's
# frontend and backend with queue qK, each with the same settings.
#
# One line a run on stdout: S, the config, each bench's jobs/s, their sum
# (agg), all jobs over the wall time of the slowest (total/wall), and the
# cores each part used over that wall time: CPU seconds (utime+stime from
# /proc/PID/stat before and after; for the benches from /usr/bin/time)
# of each shard's 3 etcd members, each shard's broker and the benches,
# divided by the wall time. "machine" is the whole box's busy and iowait
# cores from /proc/stat; "fsync" is the mean WAL fsync of each shard's
# member 1 during the run; "etcd members" the cores of each member
# (m1/m2/m3) of each shard; "other" is the box's busy cores that none of
# these processes used (kernel threads, the script, anybody else's load).
# Before each run the script waits until the box is idle (under IDLE_MAX
# cores busy over a second, for up to IDLE_WAIT s), and a run whose
# "other" exceeds OTHER_MAX cores is printed as "# discarded" and made
# again (up to TRIES times; the last is kept). The placement (emq
# shards) is printed once, for the largest S. Everything started is
# killed on exit and the etcd data dirs removed.
#
#   BIN=bin/emq  SHARDS="1 2 3"  WINDOWS="1 32"  N=10000 jobs a bench
#   REPEAT=2  SENDERS=16  SLOTS=16  PORTS=26 (ports PORTS1k1-3 etcd clients,
#   PORTS2k1-3 peers, PORTS30k frontend, PORTS40k backend, PORTS90k admin of
#   shard k)  BROKER_ARGS=  ETCD_ARGS=  RESULTS=file (JSON a run appended)
#   IDLE_MAX=0.3  IDLE_WAIT=300  OTHER_MAX=0.2  TRIES=4
set -euo pipefail
BIN=${BIN:-bin/emq}
SHARDS=${SHARDS:-"1 2 3"}
WINDOWS=${WINDOWS:-"1 32"}
N=${N:-10000}
REPEAT=${REPEAT:-2}
SENDERS=${SENDERS:-16}
SLOTS=${SLOTS:-16}
PORTS=${PORTS:-26}
RESULTS=${RESULTS:-}
IDLE_MAX=${IDLE_MAX:-0.3}
IDLE_WAIT=${IDLE_WAIT:-300}
export OTHER_MAX=${OTHER_MAX:-0.2}
TRIES=${TRIES:-4}
here=$(cd "$(dirname "$0")" && pwd)

base=$(mktemp -d "${TMPDIR:-/tmp}/emq-bench-shards.XXXXXX")
pids=()  # what runs now: etcd members and brokers
bpids=() # benches running (their /usr/bin/time)
stop() { # kills what runs now and waits for it
	local p
	for p in "${bpids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${bpids[@]}" "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=() bpids=()
}
cleanup() {
	stop
	rm -rf "$base"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "busiest processes before the runs:" >&2
ps aux --sort=-%cpu | head -6 >&2

each() { # the ticks of each pid, space-separated
	local p
	for p in "$@"; do printf '%s ' "$(ticks "$p")"; done
}
ticks() { # utime+stime of the pids, in clock ticks
	local p f s=0 a
	for p in "$@"; do
		f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -r -a a <<<"${f##*) }" # fields from 3 (state) on: utime is 14, stime 15
		s=$((s + a[11] + a[12]))
	done
	echo "$s"
}
machine() { # busy and iowait ticks of the whole box
	awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $6}' /proc/stat
}
quiet() { # waits (up to IDLE_WAIT s) until the box is idle: under IDLE_MAX cores busy over a second
	local a b i
	for ((i = 0; i < IDLE_WAIT; i++)); do
		a=$(machine)
		sleep 1
		b=$(machine)
		awk -v a="${a% *}" -v b="${b% *}" -v hz="$(getconf CLK_TCK)" -v max="$IDLE_MAX" 'BEGIN { exit !((b - a) / hz < max) }' && return 0
		[ "$i" = 0 ] && echo "waiting for the box to go idle (another load runs: $(ps -eo pcpu,args --sort=-pcpu --no-headers | head -1 | cut -c1-80))" >&2
	done
	echo "the box is still busy after ${IDLE_WAIT} s; measuring anyway" >&2
}
fsync() { # sum and count of member 1's WAL fsyncs, shard $1
	curl -fsS "http://127.0.0.1:${PORTS}1${1}1/metrics" |
		awk '/^etcd_disk_wal_fsync_duration_seconds_(sum|count) / {printf "%s ", $2} END {print ""}'
}

declare -A eps etcdp brokerp
setup() { # S: S etcd clusters, the placement on shard 1's, S brokers, qK on sK
	local S=$1 k dir placement more
	for ((k = 1; k <= S; k++)); do
		dir=$base/s$S-shard$k
		mkdir -p "$dir"
		ETCD_CLIENT=${PORTS}1$k ETCD_PEER=${PORTS}2$k
		. "$here/etcd-cluster.sh"
		eps[$k]=$endpoints
		etcdp[$k]="${pids[-3]} ${pids[-2]} ${pids[-1]}"
	done
	placement=${eps[1]}
	for ((k = 1; k <= S; k++)); do
		"$BIN" shards add "s$k" --etcd-endpoints "$placement" \
			--frontend "tcp://127.0.0.1:${PORTS}30$k" --backend "tcp://127.0.0.1:${PORTS}40$k" \
			--shard-admin "127.0.0.1:${PORTS}90$k" --shard-prefix "/emq/s$k/" --shard-etcd "${eps[$k]}" >&2
	done
	for ((k = 1; k <= S; k++)); do
		more=()
		[ "$k" = 1 ] || more=(--placement-endpoints "$placement")
		"$BIN" broker --etcd-endpoints "${eps[$k]}" --etcd-prefix "/emq/s$k/" --etcd-name "s$k-1" --shard "s$k" "${more[@]}" \
			--frontend "tcp://127.0.0.1:${PORTS}30$k" --backend "tcp://127.0.0.1:${PORTS}40$k" --admin "127.0.0.1:${PORTS}90$k" \
			--publisher-incoming "" --publisher-outgoing "" --log-level warn ${BROKER_ARGS:-} >"$base/s$S-broker$k.log" 2>&1 &
		pids+=($!)
		brokerp[$k]=$!
	done
	for ((k = 1; k <= S; k++)); do
		until curl -fsS "http://127.0.0.1:${PORTS}90$k/readyz" >/dev/null 2>&1; do
			kill -0 "${brokerp[$k]}" 2>/dev/null || { cat "$base/s$S-broker$k.log" >&2; exit 1; }
			sleep 0.1
		done
	done
	for ((k = 1; k <= S; k++)); do
		"$BIN" queues place "q$k" "s$k" --etcd-endpoints "$placement" >&2
	done
	sleep 1 # the brokers watch the placement: let them all serve by its last version
	if [ "$S" = "$maxS" ]; then
		echo "emq shards --etcd-endpoints $placement"
		"$BIN" shards --etcd-endpoints "$placement"
	fi
}

summary() { # the run's line from its files and counters (args: see run)
	python3 - "$@" <<'PY'
import json, os, sys, time
rd, S, cfg, w, r, t0, hz, m0, m1, results = sys.argv[1:11]
S, t0, hz = int(S), float(t0), float(hz)
rest = sys.argv[11:]
shards, jobs, failed = [], 0, []
for k in range(1, S + 1):
    rc, t1, e0, e1, b0, b1, f0, f1, ms0, ms1 = rest[(k - 1) * 10:k * 10]
    try:
        b = json.load(open(f"{rd}/bench{k}.json"))
    except Exception:
        b = {}
        failed.append(f"s{k} rc={rc}: " + open(f"{rd}/bench{k}.err").read().strip().replace("\n", " | ")[-300:])
    tl = open(f"{rd}/time{k}").read().strip().split("\n")[-1].split()
    bench_cpu = float(tl[-2]) + float(tl[-1]) if len(tl) >= 2 else float("nan")
    f0, f1 = [float(x) for x in f0.split()], [float(x) for x in f1.split()]
    fs = (f1[0] - f0[0]) / max(f1[1] - f0[1], 1) * 1000 if len(f0) == 2 and len(f1) == 2 else float("nan")
    shards.append(dict(jps=b.get("jobs_per_sec", 0), jobs=b.get("jobs", 0), bench_sec=b.get("seconds", 0),
                       errors=b.get("errors", 0), lost=b.get("lost", 0), dup=b.get("duplicates", 0),
                       ack_p50=b.get("ack_p50_ms", 0), ack_p99=b.get("ack_p99_ms", 0), rc=int(rc),
                       end=float(t1), etcd_cpu=(int(e1) - int(e0)) / hz, broker_cpu=(int(b1) - int(b0)) / hz,
                       bench_cpu=bench_cpu, fsync_ms=fs,
                       member_cpu=[(int(b) - int(a)) / hz for a, b in zip(ms0.split(), ms1.split())]))
    jobs += b.get("jobs", 0)
wall = max(x["end"] for x in shards) - t0
busy0, io0 = map(int, m0.split())
busy1, io1 = map(int, m1.split())
agg = sum(x["jps"] for x in shards)
ce = [x["etcd_cpu"] / wall for x in shards]
cb = [x["broker_cpu"] / wall for x in shards]
cn = sum(x["bench_cpu"] for x in shards) / wall
busy, iowait = (busy1 - busy0) / hz / wall, (io1 - io0) / hz / wall
fmt = lambda v, p="%.2f": " ".join(p % x for x in v)
other = busy - sum(ce) - sum(cb) - cn
line = ("%s S=%d %s w%s r%s  per-shard jobs/s %s  agg %.0f  total/wall %.0f (%d jobs, %.2f s)"
        "  cores: etcd %.2f (%s) brokers %.2f (%s) benches %.2f  machine busy %.2f (other %.2f) iowait %.2f"
        "  etcd members %s  ack p50/p99 ms %s  fsync ms %s") % (
    time.strftime("%H:%M:%S", time.localtime(t0)), S, cfg, w, r, fmt([x["jps"] for x in shards], "%.0f"), agg, jobs / wall, jobs, wall,
    sum(ce), fmt(ce), sum(cb), fmt(cb), cn, busy, other, iowait,
    " ".join("/".join("%.2f" % (c / wall) for c in x["member_cpu"]) for x in shards),
    " ".join("%.1f/%.1f" % (x["ack_p50"], x["ack_p99"]) for x in shards), fmt([x["fsync_ms"] for x in shards]))
bad = ["s%d errors=%d lost=%d dup=%d" % (k + 1, x["errors"], x["lost"], x["dup"])
       for k, x in enumerate(shards) if x["errors"] or x["lost"] or x["dup"]]
if bad or failed:
    line += "  PROBLEMS: " + "; ".join(bad + failed)
if other > float(os.environ["OTHER_MAX"]) and os.environ["LAST_TRY"] != "1":
    print("# discarded, other load %.2f cores: %s" % (other, line), flush=True)
    sys.exit(3)
print(line, flush=True)
if results:
    with open(results, "a") as out:
        out.write(json.dumps(dict(shards=S, cfg=cfg, window=int(w), round=int(r), wall=wall, jobs=jobs, agg_jps=agg,
                                  total_per_wall=jobs / wall, etcd_cores=ce, broker_cores=cb, bench_cores=cn,
                                  machine_busy=busy, machine_other=other, machine_iowait=iowait, per_shard=shards)) + "\n")
PY
}

run() { # S window round: S benches at once, bench K on shard K and queue qK
	local S=$1 w=$2 r=$3 k rd=$base/run t0 m0 m1
	local -a e0 e1 b0 b1 f0 f1 m0s m1s rc t1 args
	rm -rf "$rd"
	mkdir -p "$rd"
	quiet
	for ((k = 1; k <= S; k++)); do
		e0[k]=$(ticks ${etcdp[$k]}) m0s[k]=$(each ${etcdp[$k]}) b0[k]=$(ticks "${brokerp[$k]}") f0[k]=$(fsync "$k")
	done
	m0=$(machine)
	t0=$(date +%s.%N)
	for ((k = 1; k <= S; k++)); do
		/usr/bin/time -f '%U %S' -o "$rd/time$k" "$BIN" bench --frontend "tcp://127.0.0.1:${PORTS}30$k" --backend "tcp://127.0.0.1:${PORTS}40$k" \
			--queue "q$k" --senders "$SENDERS" --window "$w" --slots "$SLOTS" --jobs "$N" --ack-only --quiet --json \
			>"$rd/bench$k.json" 2>"$rd/bench$k.err" &
		bpids+=($!)
	done
	for ((k = 1; k <= S; k++)); do
		rc[k]=0
		wait "${bpids[k - 1]}" || rc[k]=$?
		t1[k]=$(date +%s.%N)
	done
	bpids=()
	m1=$(machine)
	for ((k = 1; k <= S; k++)); do
		e1[k]=$(ticks ${etcdp[$k]}) m1s[k]=$(each ${etcdp[$k]}) b1[k]=$(ticks "${brokerp[$k]}") f1[k]=$(fsync "$k")
		args+=("${rc[k]}" "${t1[k]}" "${e0[k]}" "${e1[k]}" "${b0[k]}" "${b1[k]}" "${f0[k]}" "${f1[k]}" "${m0s[k]}" "${m1s[k]}")
	done
	summary "$rd" "$S" "$SENDERS:$SLOTS" "$w" "$r" "$t0" "$(getconf CLK_TCK)" "$m0" "$m1" "$RESULTS" "${args[@]}"
}

maxS=0
for S in $SHARDS; do [ "$S" -gt "$maxS" ] && maxS=$S; done
echo "emq bench --ack-only, $SENDERS:$SLOTS, windows $WINDOWS, $N jobs a bench, $REPEAT rounds; $(nproc) cores" >&2
for S in $SHARDS; do
	echo "== $S shard(s): $S etcd clusters of 3 members, $S brokers" >&2
	setup "$S"
	for w in $WINDOWS; do
		for ((r = 1; r <= REPEAT; r++)); do
			for ((try = 1; ; try++)); do
				rc=0
				LAST_TRY=$((try >= TRIES)) run "$S" "$w" "$r" || rc=$?
				[ "$rc" = 3 ] || break
			done
			[ "$rc" = 0 ] || exit "$rc"
		done
	done
	stop
	rm -rf "$base"/s"$S"-*
done
