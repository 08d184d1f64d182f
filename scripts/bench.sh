#!/usr/bin/env bash
# make bench: EMQ beside the peers in one session, then EMQ alone; the
# tables go to docs/benchmarks.md (hand-written notes below its marker line
# are kept). The peers run through ../shared/anchors/run.sh (it installs
# beanstalkd, Redis and RabbitMQ with apt-get when they are missing, so it
# wants root); about 11 minutes on 2 cores once those are installed.
#
#   N=10000      jobs per run, peers and EMQ side by side
#   REPEAT=2     runs per configuration
#   PEERS="beanstalkd rabbitmq asynq jetstream river pubsub"   ("" = EMQ alone)
#   ROUNDS=3     1:1 rounds of beanstalkd and EMQ --ack-only taken in turn, each with
#                its own disk probe: the disk's speed drifts over minutes (0 = skip)
#   JOBS=20000   jobs per run of EMQ's own table
#   PRELOAD=1000000   jobs stored before the "stored" runs (0 = skip them)
#   STORED_JOBS=100000 STORED_ROUNDS=2   the stored runs: an empty journal and one
#                with PRELOAD jobs, in turn, STORED_JOBS a run (a short run
#                measures the start, not the steady state: 20,000 jobs gave
#                0.65-0.89 of empty where 100,000 gave 0.96-1.02)
#   ETCD=1       EMQ as a group on a 3-member etcd (scripts/bench-etcd.sh), beside
#                JetStream R3 when PEERS has jetstream (0 = skip both)
#   SERVER_CPU=1 each server's CPU a job (run.sh's SERVER_CPU), EMQ among the peers
#                as its own emq broker process for it (0 = skip)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/emq}
N=${N:-10000}
REPEAT=${REPEAT:-2}
PEERS=${PEERS-"beanstalkd rabbitmq asynq jetstream river pubsub"}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-20000}
PRELOAD=${PRELOAD:-1000000}
STORED_JOBS=${STORED_JOBS:-100000}
STORED_ROUNDS=${STORED_ROUNDS:-2}
ANCHORS=${ANCHORS:-../shared/anchors}
ETCD=${ETCD:-1}
SERVER_CPU=${SERVER_CPU:-1}
jetstream_modes=sync
[ "$ETCD" = 1 ] && jetstream_modes="sync r3"
out=docs/benchmarks.md
started=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/emq-bench.XXXXXX")
written=0 # the runs are kept if the table is not written: minutes of measuring
trap '[ "$written" = 1 ] && rm -rf "$work" || echo "make bench: the runs are kept in $work" >&2; rm -f "$out.new"' EXIT
runs=$work/emq.txt
: > "$runs"

# The peers first, in their own work dir (its *.txt hold the per-run lines).
if [ -n "$PEERS" ] && [ -x "$ANCHORS/run.sh" ]; then
  echo "== the peers: $ANCHORS/run.sh $PEERS" >&2
  # With SERVER_CPU, EMQ runs among them as its own broker process: its
  # CPU a job is read as theirs is.
  cpu_peers=$PEERS
  [ "$SERVER_CPU" = 1 ] && cpu_peers="$PEERS emq"
  # shellcheck disable=SC2086
  WORK="$work/anchors" N=$N REPEAT=$REPEAT PACED_RATE=0 TIMEOUT=120s \
    BEANSTALK_MODES=fsync ASYNQ_MODES=durable JETSTREAM_MODES="$jetstream_modes" \
    SERVER_CPU=$SERVER_CPU EMQ_BIN="$(realpath "$BIN")" \
    "$ANCHORS/run.sh" $cpu_peers >&2 || echo "== run.sh failed: the rows it did not finish are left out" >&2
else
  [ -n "$PEERS" ] && echo "== $ANCHORS/run.sh not found: EMQ alone" >&2
  mkdir -p "$work/anchors"
  s=$(dd if=/dev/zero of="$work/probe" bs=200 count=2000 oflag=dsync 2>&1 | awk '/copied/ {for (i = 1; i <= NF; i++) if ($i == "s,") print $(i-1)}')
  rm -f "$work/probe"
  [ -n "$s" ] && awk -v s="$s" 'BEGIN { printf "disk-probe dd_200B_oflag=dsync us/write=%.0f\n", s / 2000 * 1e6 }' > "$work/anchors/results.txt"
fi

run() { # kind, label, then emq bench flags
  local kind=$1 label=$2; shift 2
  local json
  echo "emq bench $*" >&2
  if json=$("$BIN" bench --quiet --json "$@") && [ -n "$json" ]; then
    printf '%s\t%s\t%s\n' "$kind" "$label" "$json" >> "$runs"
  else
    echo "emq bench $* failed; its row is left out" >&2
  fi
}

echo "== EMQ beside them" >&2
for pc in 1:1 4:4 16:16; do
  p=${pc%:*} c=${pc#*:}
  for ((i = 0; i < REPEAT; i++)); do
    run ack "$pc" --senders "$p" --slots "$c" --window 1 --jobs "$N" --ack-only
    run w1 "$pc" --senders "$p" --slots "$c" --window 1 --jobs "$N"
  done
done
for ((i = 0; i < REPEAT; i++)); do
  run w32 16:16 --senders 16 --slots 16 --window 32 --jobs "$N"
  run pubsub fan-out --pubsub --subscribers 16 --messages 200000
done

if [ "$ETCD" = 1 ]; then
  echo "== EMQ on a 3-member etcd" >&2
  BIN=$BIN N=$N REPEAT=$REPEAT ./scripts/bench-etcd.sh >> "$runs" || echo "== bench-etcd.sh failed: its rows are left out" >&2
fi

# 1:1 is bound by the disk's synced writes, whose time drifts by tens of
# percent over minutes here: the closest peer and EMQ in turn, each round
# with its own probe, so that both see the same disk.
if [[ " $PEERS " == *" beanstalkd "* ]] && [ -x "$ANCHORS/run.sh" ]; then
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "== 1:1 round $r of $ROUNDS" >&2
    WORK="$work/round$r" N=$N REPEAT=1 CONFIGS=1:1 PACED_RATE=0 TIMEOUT=120s BEANSTALK_MODES=fsync \
      "$ANCHORS/run.sh" beanstalkd >&2 || echo "== run.sh failed in round $r" >&2
    run round "$r" --senders 1 --slots 1 --window 1 --jobs "$N" --ack-only
  done
fi

echo "== EMQ alone" >&2
run alone "4×4" --senders 4 --slots 4 --jobs "$JOBS"
run alone "16×16" --senders 16 --slots 16 --jobs "$JOBS"
run alone "16×16 @5,000/s" --senders 16 --slots 16 --rate 5000 --jobs 25000
# A full journal against an empty one, in turn, the first of each round
# alternating (a run leaves its writes and its freed memory to the next).
for ((r = 1; r <= STORED_ROUNDS && PRELOAD > 0; r++)); do
  order="empty full"
  ((r % 2 == 0)) && order="full empty"
  for which in $order; do
    preload=()
    [ "$which" = full ] && preload=(--preload "$PRELOAD")
    run stored "$r $which" --senders 16 --slots 16 --jobs "$STORED_JOBS" "${preload[@]}"
  done
done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"

# Hand-written notes below the marker line survive a new run.
marker='<!-- Notes below this line are written by hand; make bench keeps them. -->'
notes=$(sed -n "/^$marker\$/,\$p" "$out" 2>/dev/null || true)
mkdir -p docs
{
  echo "# Benchmarks"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3), $(uname -r)."
  echo "The session took $(( ($(date +%s) - started + 30) / 60 )) minutes (\`make bench\`, N=$N, REPEAT=$REPEAT)."
  echo
  go run ./internal/benchtable -anchors "$work/anchors" -rounds "$work" -emq "$runs" -commit "$commit" -date "$(date -u +%Y-%m-%d)"
  echo "Targets (DESIGN.md): ahead of every durable peer at 1:1, 4:4 and 16:16; at 16:16 with a"
  echo "window, at least 8× beanstalkd-fsync and 20,000 jobs/s; ACK p99 ≤ 5 ms paced at 5,000 jobs/s;"
  echo "1M jobs stored within 10 % of empty; pub/sub at least 1,000,000 deliveries/s."
  if [ -n "$notes" ]; then echo; echo "$notes"; else echo; echo "$marker"; fi
} > "$out.new"
mv "$out.new" "$out"
written=1
# sed reads the file itself: under pipefail, a cat whose reader quit
# early died of SIGPIPE, and make bench exited 141 after it had worked.
sed "/^$marker\$/q" "$out"
