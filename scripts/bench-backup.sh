#!/usr/bin/env bash
# What a backup costs a serving broker: emq bench 16x16 with 1,000,000
# jobs stored (a queue nobody serves), backed up 6 s into the run,
# unpaced and at the API's default pace (32 MiB/s), in turn for ROUNDS
# rounds (default 5). Each run says how long the backup took, the jobs
# done a second while it ran, and from the run's first second to its
# start; then each pace's ratios sorted and their median. The backup goes to /dev/shm: a
# backup through the admin API is written where its client runs, not on
# the broker's disk. EMQ=path/to/emq (default bin/emq).
set -euo pipefail
EMQ=${EMQ:-bin/emq}
ROUNDS=${ROUNDS:-5}
out=$(mktemp)
trap 'rm -f "$out" /dev/shm/emq-bench.emqbackup' EXIT
for round in $(seq 1 "$ROUNDS"); do
	for pace in 0 32MiB; do
		line=$("$EMQ" bench --senders 16 --slots 16 --jobs 400000 --preload 1000000 --backup /dev/shm/emq-bench.emqbackup \
			--backup-pace "$pace" --json --quiet)
		echo "$line" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%s %.2f %.0f %.0f %.3f" % (sys.argv[1], r["backup_seconds"], r["backup_jobs_per_sec"], r["before_jobs_per_sec"],
      r["backup_jobs_per_sec"] / r["before_jobs_per_sec"]))' "$pace" | tee -a "$out"
	done
done
echo "pace: backup seconds, jobs/s during it, jobs/s before it, ratio (sorted ratios, median)"
for pace in 0 32MiB; do
	awk -v p="$pace" '$1 == p {print $5}' "$out" | sort -n | tr '\n' ' ' | awk -v p="$pace" '{n = split($0, v, " "); printf "%s: %s median %s\n", p, $0, (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2}'
done
