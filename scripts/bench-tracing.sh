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
# tracing) with tracing off. EMQ=path/to/emq (default bin/emq); extra
# arguments go to every run (--ack-only, --jobs N).
set -euo pipefail
EMQ=${EMQ:-bin/emq}
ROUNDS=${ROUNDS:-8}
SINK=${SINK:-drop}
out=$(mktemp)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f "$out"' EXIT
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
for round in $(seq 1 "$ROUNDS"); do
	for cfg in "${configs[@]}"; do
		name=${cfg%%|*}
		bin=$EMQ
		[ "$name" = before ] && bin=$BEFORE
		# shellcheck disable=SC2086
		r=$(env ${cfg#*|} "$bin" bench --senders 16 --window 32 --slots 16 --jobs 30000 --quiet "$@" | awk '/jobs\/s/ {print $1; exit}')
		echo "$name $r" | tee -a "$out"
	done
done
echo
awk '{runs[$1] = runs[$1] " " $2} END {for (k in runs) print k, runs[k]}' "$out" | sort | while read -r name runs; do
	sorted=$(echo "$runs" | tr ' ' '\n' | sort -n | tr '\n' ' ')
	median=$(echo "$runs" | tr ' ' '\n' | sort -n | awk '{v[NR] = $1} END {print (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2}')
	echo "$name: $sorted median $median"
done
