#!/usr/bin/env bash
# Runs every Go fuzz target of the module for $FUZZTIME each: a duration
# (2m) or a count of inputs (100000x). go test runs one target at a time.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-100000x}
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg=./$(dirname "${file#./}")
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r target; do
		echo "fuzz $pkg $target for $FUZZTIME"
		"$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
	done
done
