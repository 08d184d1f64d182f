#!/usr/bin/env bash
# What a rekey costs a serving broker (issue 48): emq bench 16x16 window 32
# with PRELOAD jobs stored under an old key, its broker told to seal them
# again under a new one 6 s into the run (--rekey), then the same run
# without; the jobs/s of the same seconds of both (--json's per_second),
# ROUNDS rounds in turn. EMQ=path/to/emq (default bin/emq), RATE values a
# second (0: the broker's default), JOBS a run: it must outlast the rekey.
set -euo pipefail
EMQ=${EMQ:-bin/emq}
ROUNDS=${ROUNDS:-3}
PRELOAD=${PRELOAD:-1000000}
JOBS=${JOBS:-1500000}
RATE=${RATE:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$EMQ" keygen --journal new > "$work/keys"
"$EMQ" keygen --journal old >> "$work/keys"
for ((round = 1; round <= ROUNDS; round++)); do
	"$EMQ" bench --quiet --json --preload "$PRELOAD" --journal-keys "$work/keys" --rekey --rekey-rate "$RATE" --jobs "$JOBS" > "$work/with.json"
	"$EMQ" bench --quiet --json --preload "$PRELOAD" --journal-keys "$work/keys" --jobs "$JOBS" > "$work/without.json"
	python3 - "$round" "$work/with.json" "$work/without.json" <<'PY'
import json, sys
r, w, o = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
a, b = 6, 6 + int(w["rekey_seconds"])
avg = lambda run: sum(run["per_second"][a:b]) / len(run["per_second"][a:b])
print(f"round {r}: rekey {w['rekey_seconds']:.1f} s, {w['rekey_values']} values ({w['rekey_values'] / w['rekey_seconds']:.0f} a second); "
      f"seconds {a}-{b}: {avg(w):.0f} jobs/s with it, {avg(o):.0f} without ({avg(w) / avg(o):.2f}); "
      f"in the run: {w['before_jobs_per_sec']:.0f} before it, {w['rekey_jobs_per_sec']:.0f} during it", flush=True)
PY
done
