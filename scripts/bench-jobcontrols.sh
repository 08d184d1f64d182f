#!/usr/bin/env bash
# What a priority, a unique key or a batch on every job costs: emq bench
# 16x16 plain, with --priorities 1, --priorities 10, --unique and --batch,
# the configurations in turn for ROUNDS rounds (default 10), then each one's
# runs sorted and its median. EMQ=path/to/emq (default bin/emq); extra
# arguments go to every run (--ack-only, --jobs N).
set -euo pipefail
EMQ=${EMQ:-bin/emq}
ROUNDS=${ROUNDS:-10}
out=$(mktemp)
for round in $(seq 1 "$ROUNDS"); do
	for cfg in "plain:" "priorities-1:--priorities 1" "priorities-10:--priorities 10" "unique:--unique" "batch:--batch b"; do
		name=${cfg%%:*}
		# shellcheck disable=SC2086
		r=$("$EMQ" bench --senders 16 --slots 16 --jobs 30000 ${cfg#*:} "$@" | awk '/jobs\/s/ {print $1; exit}')
		echo "$name $r" | tee -a "$out"
	done
done
echo
awk '{runs[$1] = runs[$1] " " $2} END {for (k in runs) print k, runs[k]}' "$out" | sort | while read -r name runs; do
	sorted=$(echo "$runs" | tr ' ' '\n' | sort -n | tr '\n' ' ')
	median=$(echo "$runs" | tr ' ' '\n' | sort -n | awk '{v[NR] = $1} END {print (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2}')
	echo "$name: $sorted median $median"
done
rm -f "$out"
