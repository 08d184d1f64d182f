#!/usr/bin/env bash
# trace-demo: one job's trace in a real Jaeger. Starts Jaeger (bin/jaeger,
# built from its Go module by make jaeger), a broker and an emq worker
# --exec exporting their spans to it by the OTEL_* variables, and sends
# two jobs with emq send (exporting its span too): the first fails once
# and runs again. Prints each job's trace from Jaeger's query API and the
# address of its page, then waits (Ctrl-C ends it; HOLD=0 does not wait).
#
#   make trace-demo         (JAEGER_UI_ASSETS=DIR: a built Jaeger UI to serve)
set -euo pipefail
BIN=${BIN:-bin/emq}
JAEGER=${JAEGER:-bin/jaeger}
HOLD=${HOLD:-1}
QUERY=${QUERY:-127.0.0.1:16686}

dir=$(mktemp -d /tmp/emq-trace-demo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

JAEGER_OTLP_GRPC=127.0.0.1:47317 JAEGER_OTLP_HTTP=127.0.0.1:47318 JAEGER_QUERY_HTTP=$QUERY \
	JAEGER_QUERY_GRPC=127.0.0.1:47316 JAEGER_UI_ASSETS=${JAEGER_UI_ASSETS:-} \
	"$JAEGER" --config "file:internal/jaegertest/jaeger.yaml" >"$dir/jaeger.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do curl -fs "http://$QUERY/api/services" >/dev/null && break; sleep 0.05; done
curl -fs "http://$QUERY/api/services" >/dev/null || { echo "trace-demo: Jaeger did not start:"; cat "$dir/jaeger.log"; exit 1; }

export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:47318 OTEL_BSP_SCHEDULE_DELAY=100
OTEL_SERVICE_NAME=emq-broker "$BIN" broker --data-dir "$dir/data" --frontend tcp://127.0.0.1:47390 \
	--backend tcp://127.0.0.1:47391 --admin 127.0.0.1:47393 --publisher-incoming "" --publisher-outgoing "" \
	--retry-backoff 200ms 2>"$dir/broker.log" &
pids+=($!)
for _ in $(seq 200); do curl -fs http://127.0.0.1:47393/readyz >/dev/null && break; sleep 0.05; done
# The worker's command fails a job's first attempt when its payload says so.
OTEL_SERVICE_NAME=emq-worker "$BIN" worker --broker tcp://127.0.0.1:47391 --queues signup --concurrency 2 \
	--exec 'payload=$(cat); case "$payload" in *flaky*) [ "$EMQ_ATTEMPT" = 1 ] && { echo "mail server busy" >&2; exit 1; };; esac; sleep 0.05; echo "sent: $payload"' \
	2>"$dir/worker.log" &
pids+=($!)

show() { # print the trace of the job msgid ($1) with at least $2 spans, from Jaeger's query API
	python3 - "$QUERY" "$1" "$2" <<'PY'
import json, sys, time, urllib.parse, urllib.request
query, msgid, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
url = "http://%s/api/traces?%s" % (query, urllib.parse.urlencode(
    {"service": "emq-client", "lookback": "1h", "tags": json.dumps({"messaging.message.id": msgid})}))
for _ in range(100):  # the spans come in batches
    data = json.load(urllib.request.urlopen(url))["data"]
    if data:
        t = json.load(urllib.request.urlopen("http://%s/api/traces/%s" % (query, data[0]["traceID"])))["data"][0]
        if len(t["spans"]) >= want:
            break
    time.sleep(0.1)
else:
    sys.exit("trace-demo: Jaeger has no trace of job %s" % msgid)
procs = {k: v["serviceName"] for k, v in t["processes"].items()}
spans = sorted(t["spans"], key=lambda s: s["startTime"])
t0 = spans[0]["startTime"]
for s in spans:
    events = [f["value"] for l in s.get("logs", []) for f in l["fields"] if f["key"] == "event"]
    print("  %8.2f ms %8.2f ms  %-11s %-16s %s" % ((s["startTime"] - t0) / 1000, s["duration"] / 1000,
          procs[s["processID"]], s["operationName"], " ".join(events)))
print("  http://%s/trace/%s" % (query, t["traceID"]))
PY
}
for payload in "welcome mail (flaky)" "invoice mail"; do
	msgid=$(OTEL_SERVICE_NAME=emq-client "$BIN" send --broker tcp://127.0.0.1:47390 --queue signup --retry-count 3 "$payload")
	echo "job $msgid \"$payload\":"
	case "$payload" in *flaky*) show "$msgid" 8 ;; *) show "$msgid" 5 ;; esac
done
if [ "$HOLD" = 1 ]; then
	echo "Jaeger stays up until Ctrl-C (HOLD=0 to stop at once)."
	wait "${pids[0]}"
fi
