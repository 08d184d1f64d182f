#!/usr/bin/env bash
# What tracing costs: emq bench 16x16 (16 senders x 32 in flight, a
# worker of 16 slots, the bench's own broker, all in one process) with
# tracing off, on with nothing sampled (always_off: trace context made,
# sent and read, no span recorded), at 1 % (parentbased_traceidratio
# 0.01) and at 100 % sampling, the configurations in turn for ROUNDS rounds (default 8),
# then each one's runs sorted and its median. Spans go over OTLP/HTTP to
# a sink in another process that reads and drops them (a collector's
# cost is not EMQ's); SINK=jaeger sends them to bin/jaeger instead.
# BEFORE=path/to/emq adds runs of another binary (one built before
# tracing) with tracing off; ONLY="before off" runs those alone.
# EMQ=path/to/emq (default bin/emq), JOBS a
# run (default 60000); extra arguments go to every run (--ack-only).
set -euo pipefail
EMQ=${EMQ:-bin/emq}
ROUNDS=${ROUNDS:-8}
JOBS=${JOBS:-60000}
SINK=${SINK:-drop}
out=$(mktemp)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f "$out" "$out.time"' EXIT
port=47418
if [ "$SINK" = jaeger ]; then
	JAEGER_OTLP_GRPC=127.0.0.1:47417 JAEGER_OTLP_HTTP=127.0.0.1:$port JAEGER_QUERY_HTTP=127.0.0.1:47416 \
		JAEGER_QUERY_GRPC=127.0.0.1:47415 JAEGER_UI_ASSETS= bin/jaeger --config file:internal/jaegertest/jaeger.yaml >/dev/null 2>&1 &
else
	python3 - "$port" <<'PY' &
import http.server, sys
class Drop(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Drop).serve_forever()
PY
fi
pids+=($!)
sleep 1
endpoint=http://127.0.0.1:$port
configs=("off|" "unsampled|OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_SAMPLER=always_off" "sampled-1%|OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.01"
	"sampled-100%|OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_SAMPLER=parentbased_always_on")
[ -n "${BEFORE:-}" ] && configs=("before|" "${configs[@]}")
if [ -n "${ONLY:-}" ]; then # ONLY="before off": those configurations alone
	kept=()
	for cfg in "${configs[@]}"; do
		for name in $ONLY; do [ "${cfg%%|*}" = "$name" ] && kept+=("$cfg"); done
	done
	configs=("${kept[@]}")
fi
for round in $(seq 1 "$ROUNDS"); do
	# Each round starts one configuration later than the one before, so
	# that none always runs after the same one (a run leaves its journal's
	# writes and its freed memory to the next).
	n=${#configs[@]}
	for k in $(seq 0 $((n - 1))); do
		cfg=${configs[$(((round + k) % n))]}
		name=${cfg%%|*}
		bin=$EMQ
		[ "$name" = before ] && bin=$BEFORE
		# shellcheck disable=SC2086
		r=$(env ${cfg#*|} /usr/bin/time -f '%U %S' -o "$out.time" "$bin" bench --senders 16 --window 32 --slots 16 --jobs "$JOBS" --quiet --json "$@")
		jobs_s=$(echo "$r" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs_per_sec"]))')
		cpu=$(awk -v n="$JOBS" '{printf "%.1f", ($1 + $2) / n * 1e6}' "$out.time")
		echo "$name $jobs_s $cpu" | tee -a "$out"
	done
done
echo
for col in 2 3; do
	[ "$col" = 2 ] && echo "jobs/s, each configuration's runs sorted, and the median:" || echo "CPU µs a job (the bench process: broker, senders and worker), sorted, and the median:"
	awk -v c="$col" '{runs[$1] = runs[$1] " " $c} END {for (k in runs) print k, runs[k]}' "$out" | sort | while read -r name runs; do
		sorted=$(echo "$runs" | tr ' ' '\n' | sort -n | tr '\n' ' ')
		median=$(echo "$runs" | tr ' ' '\n' | sort -n | awk '{v[NR] = $1} END {print (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2}')
		echo "  $name: $sorted median $median"
	done
done
