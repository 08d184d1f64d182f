#!/usr/bin/env bash
# make mutations: each line that keeps a durability promise, removed or
# inverted in a scratch copy of the tree, must fail the test that guards
# it. The script runs every test of the table on the tree as it is (each
# must pass, not skip), then, one row at a time, applies the row's
# mutation (an exact text, found exactly once, replaced), runs the
# row's test, and puts the file back. It prints a table; it exits
# non-zero when a mutation survived, when a test hung (a test must fail,
# not hang), or when a mutation's text is no longer in its file (the
# source moved: update the row). Not part of make test. Needs root and
# /dev/fuse (the power-cut tests); MUTATIONS=regex runs the rows whose
# name matches. About 2 minutes on 2 cores.
set -euo pipefail
GO=${GO:-go}
TIMEOUT=${MUTATION_TIMEOUT:-5m}
ONLY=${MUTATIONS:-}
cd "$(dirname "$0")/.."

# One row a line: name, package, test, file, the text, what replaces it.
# The texts are bash $'...' strings (\t a tab, \n a newline). A mutation
# guarded by two tests has two rows.
rows=() olds=() news=()
m() { rows+=("$1|$2|$3|$4"); olds+=("$5"); news+=("$6"); }

# The log's fdatasync before an ACK.
m log-fdatasync-skipped ./store/boltstore/ TestOneFlushOfTheLogPerCommit store/wal/wal.go $'\tif err := fdatasync(l.f); err != nil {' $'\tif err := error(nil); err != nil {'
m log-fdatasync-skipped ./broker/ TestPowerCutLosesNoAckedJob store/wal/wal.go $'\tif err := fdatasync(l.f); err != nil {' $'\tif err := error(nil); err != nil {'
m commit-not-flushed ./store/boltstore/ TestOneFlushOfTheLogPerCommit store/boltstore/log.go $'j.log.Append([][]byte{rec}, durable)' $'j.log.Append([][]byte{rec}, false)'
# At most one fdatasync of the log per group commit.
m log-flushed-twice-an-append ./store/boltstore/ TestOneFlushOfTheLogPerCommit store/wal/wal.go $'\tif sync {\n\t\tif err := l.Sync(); err != nil {' $'\tif sync {\n\t\tl.dirty = l.Sync() == nil\n\t\tif err := l.Sync(); err != nil {'
m no-group-commit ./store/boltstore/ TestOneFlushOfTheLogPerCommit store/boltstore/bolt.go $'store.CoreOptions{MaxBatch: opts.MaxBatch,' $'store.CoreOptions{MaxBatch: 1,'
# bbolt's flush of a checkpoint before the segments it covers are deleted.
m bbolt-nosync ./broker/ TestPowerCutAfterACheckpointLosesNoAckedJob store/boltstore/bolt.go $'\t\tFreelistType: bolt.FreelistMapType,' $'\t\tFreelistType: bolt.FreelistMapType,\n\t\tNoSync:       true,'
# Each record's CRC-32C, and the segment header's.
m record-crc-skipped ./store/wal/ TestEveryFieldIsChecked store/wal/wal.go $'} else if recordSum(rh[:], payload) != sum {' $'} else if false {'
m header-crc-skipped ./store/wal/ TestEveryFieldIsChecked store/wal/wal.go $'case crc32Header(hdr[:20]) != binary.LittleEndian.Uint32(hdr[20:]):' $'case false:'
# A segment's header flushed before it takes its name.
m header-not-flushed ./store/wal/ TestPowerCutWhileASegmentStarts store/wal/wal.go $'\tif _, err := f.WriteAt(hdr[:], 0); err != nil {\n\t\tf.Close()\n\t\treturn err\n\t}\n\tif err := f.Sync(); err != nil {' $'\tif _, err := f.WriteAt(hdr[:], 0); err != nil {\n\t\tf.Close()\n\t\treturn err\n\t}\n\tif err := error(nil); err != nil {'
# The torn tail zeroed at open.
m torn-tail-not-zeroed ./store/wal/ TestAppendAfterATornTailLeavesNoOldBytes store/wal/wal.go $'\t\tif !l.opts.ReadOnly {\n\t\t\tif err := zero(' $'\t\tif false {\n\t\t\tif err := zero('
# A damaged value quarantined, never dispatched.
m damaged-value-served ./broker/ TestDamagedValueIsNeverDispatched store/boltstore/kv.go $'\tdropPages(v)\n\tif !ok {' $'\tdropPages(v)\n\tif !ok && val == nil {'
m damaged-value-served ./store/boltstore/ TestDamagedRecordIsMovedAside store/boltstore/kv.go $'\tdropPages(v)\n\tif !ok {' $'\tdropPages(v)\n\tif !ok && val == nil {'
m large-payload-unchecked ./broker/ TestDamagedValueIsNeverDispatched store/boltstore/kv.go $'\t\tout[i] = r.Get(bucket, k)' $'\t\tout[i], _ = r.Peek(bucket, k)'
# A value the memtable keeps in the log: its CRC-32C checked when read
# back, its damage carried into bbolt, its segment kept while a read
# holds it, and a checkpoint's transactions but the last leaving
# meta/checkpoint where it was.
m logged-value-crc-skipped ./store/boltstore/ TestDamagedValueInTheLogIsSetAside store/boltstore/checkpoint.go $'crc32.Checksum(v, castagnoli) == it.ref.sum, nil' $'crc32.Checksum(v, castagnoli) == it.ref.sum || true, nil'
m logged-damage-sealed-good ./store/boltstore/ TestCheckpointKeepsTheDamageOfALoggedValue store/boltstore/checkpoint.go $'\t\tv[len(v)-1] ^= 0xff' $'\t\t_ = v'
m view-not-pinned ./store/boltstore/ TestReadBeforeACheckpointOutlivesItsSegments store/boltstore/log.go $'\tpin := j.pin()\n\tj.mu.Unlock()\n\tdefer j.unpin(pin)' $'\tj.mu.Unlock()'
m checkpoint-moved-each-tx ./store/boltstore/ TestCrashBetweenTheTransactionsOfACheckpoint store/boltstore/checkpoint.go $'\t\t\t\t\tfrom = next\n\t\t\t\t\treturn nil' $'\t\t\t\t\tfrom = next\n\t\t\t\t\treturn tx.Bucket(store.BucketMeta).Put(checkpointKey, sealed(store.BucketMeta, checkpointKey, at.encode()))'

# A BULK all or nothing: its jobs tried on a stage, put in the
# transaction only once every one is taken; the broker refusing the whole
# bulk for one bad job.
m bulk-without-stage ./broker/ TestBulkUniqueKeys store/bulk.go $'\t\t\ts := &stage{Tx: t, latest: map[string]int{}}\n\t\t\tfor i, op := range ops {\n\t\t\t\tif err := op.apply(s); err != nil {' $'\t\t\ts := &stage{Tx: t, latest: map[string]int{}}\n\t\t\tfor i, op := range ops {\n\t\t\t\tif err := op.apply(t); err != nil {'
m bulk-bad-job-skipped ./broker/ TestBulkAllOrNothing broker/bulk.go $'\t\tif err != nil {\n\t\t\trefuse(i, emqp.CodeBadRequest, err.Error())\n\t\t\treturn\n\t\t}' $'\t\tif err != nil {\n\t\t\tcontinue\n\t\t}'
# Flow control: a tenant's concurrency, a limiter's room, a limiter that
# does not exist refused, the tenants' weights.
m tenant-limit-ignored ./broker/ TestTenantConcurrencyIsNeverExceeded broker/fair.go $'\tok, wait := b.room(t.lim, t.running, &t.rate, c)' $'\tok, wait := true, time.Duration(0)'
m limiter-ignored ./broker/ TestLimiterSharedByTwoQueues broker/limiters.go $'\t\tok, wait := b.room(lm.lim, lm.running, &lm.rate, c)' $'\t\tok, wait := true, time.Duration(0)'
m undefined-limiter-taken ./broker/ TestLimiterSharedByTwoQueues broker/limiters.go $'\t\tif b.limiters[name] == nil {\n\t\t\treturn name' $'\t\tif false {\n\t\t\treturn name'
m weights-ignored ./broker/ TestTenantsTakeTurnsByWeight broker/fair.go $'\t\t\tln.credit = ln.t.weight' $'\t\t\tln.credit = 1'
# Encryption at rest: every value encrypted before it is stored, and a
# value whose authentication tag fails never served.
m value-not-encrypted ./store/boltstore/ TestEncryptedAtRestHoldsNoPlaintext store/encrypt.go $'\treturn rk.aead.Seal(dst, dst[at:at+nonceSize], plain, additional(part, bucket, key))' $'\treturn append(dst, plain...)'
m tag-not-checked ./store/boltstore/ TestEncryptedDamageIsQuarantined store/encrypt.go $'\tif err != nil {\n\t\treturn nil, fmt.Errorf("it fails its authentication tag (key %s)", name)' $'\tif err != nil {\n\t\treturn body[nonceSize:], nil'
# Keys rotated online: what a rekey step reads is sealed again, its
# place noted with it (a restart or the next leader goes on from there),
# the old keys dropped at the end, and keys without one still needed
# refused.
m rekey-value-not-sealed ./store/boltstore/ TestRekeyUnderLoad store/rekey.go $'\t\t\t\tif err := t.Put(bucket, k, c); err != nil {' $'\t\t\t\tif err := error(nil); err != nil {'
m rekey-place-not-noted ./store/boltstore/ TestRekeyUnderLoad store/rekey.go $'\t\t\treturn t.Put(BucketMeta, RekeyKey, v)\n\t\t}, func(err error) { done(struct{}{}, err) })' $'\t\t\treturn t.Put(BucketMeta, []byte("elsewhere"), v)\n\t\t}, func(err error) { done(struct{}{}, err) })'
m rekey-not-resumed ./store/boltstore/ TestRekeyUnderLoad store/boltstore/bolt.go $'\tif err := j.ResumeRekey(); err != nil {' $'\tif err := error(nil); err != nil {'
m rekey-not-resumed-by-next-leader ./group/ TestGroupRekeyAcrossFailover store/etcdstore/etcd.go $'\t\tif err := e.ResumeRekey(); err != nil {' $'\t\tif err := error(nil); err != nil {'
m rekey-old-key-kept ./store/etcdstore/ TestEtcdRekeyUnderLoad store/rekey.go $'\t\t\t\t\tdropped = append(dropped, rec.Name)' $'\t\t\t\t\tkeep = append(keep, rec)'
m rekey-rate-after-pause ./store/boltstore/ TestRekeyUnderLoad store/rekey.go $'\tcase <-j.rekey.wake:\n' $''
m needed-key-removed ./group/ TestGroupRekeyAcrossFailover store/rekey.go $'\tif err := k.check(r, "journal "+j.name); err != nil {' $'\tif err := k.check(r, "journal "+j.name); err != nil && false {'
# Each job held by its own msgid (issue 49: UUIDs kept by their bytes),
# and each replayed job in a slot of its own.
m msgid-keys-collide ./broker/ TestJobMapKeepsMsgidsApart broker/jobmap.go $'func lowerHex(c byte) (byte, bool) {\n\tswitch {' $'func lowerHex(c byte) (byte, bool) {\n\tc |= 0x20\n\tswitch {'
m replay-slot-shared ./broker/ TestRestartReplaysInOrder broker/jobs.go $'\t\tslab = slab[1:]' $'\t\t_ = slab[1:]'

# The scratch copy: the tree as it is in this checkout (tracked and new
# files, not ignored ones), beside a link to ../shared, which tests read.
scratch=$(mktemp -d /tmp/emq-mut-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/emq"
git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$scratch/emq"
[ -d ../shared ] && ln -s "$(cd ../shared && pwd)" "$scratch/shared"
tree=$scratch/emq
export EMQ_REQUIRE_FUSE=1 # a power-cut test that skipped would pass

# run PKG TEST LOG: runs one test in the scratch copy; its status.
run() {
	(cd "$tree" && "$GO" test -count=1 -v -timeout "$TIMEOUT" -run "^$2\$" "$1") >"$3" 2>&1
}

# apply FILE OLD NEW: the one place of OLD in FILE becomes NEW.
apply() {
	local f=$tree/$1 old=$2 new=$3 text rest n=0
	text=$(cat "$f" && printf x)
	text=${text%x}
	rest=$text
	while [[ $rest == *"$old"* ]]; do
		rest=${rest#*"$old"}
		n=$((n + 1))
	done
	if [ "$n" != 1 ]; then
		return 1
	fi
	printf '%s' "${text/"$old"/"$new"}" >"$f"
}

selected=()
for i in "${!rows[@]}"; do
	IFS='|' read -r name _ _ _ <<<"${rows[$i]}"
	if [ -z "$ONLY" ] || [[ $name =~ $ONLY ]]; then
		selected+=("$i")
	fi
done
[ ${#selected[@]} -gt 0 ] || { echo "mutations: no row's name matches $ONLY" >&2; exit 2; }

# Every test of the table passes on the tree as it is.
declare -A base
for i in "${selected[@]}"; do
	IFS='|' read -r _ pkg test _ <<<"${rows[$i]}"
	[ -n "${base[$pkg $test]:-}" ] && continue
	echo "[mutations] $test ($pkg) on the tree as it is" >&2
	log=$scratch/base.log
	if ! run "$pkg" "$test" "$log" || ! grep -q "^--- PASS: $test " "$log"; then
		tail -30 "$log" >&2
		echo "mutations: $test ($pkg) does not pass on the tree as it is: no mutation can be judged by it" >&2
		exit 2
	fi
	base[$pkg $test]=1
done

bad=0
table="| mutation | file | test | result |"$'\n'"|---|---|---|---|"
for i in "${selected[@]}"; do
	IFS='|' read -r name pkg test file <<<"${rows[$i]}"
	echo "[mutations] $name: $test ($pkg)" >&2
	cp "$tree/$file" "$scratch/orig"
	log=$scratch/$name.$test.log
	if ! apply "$file" "${olds[$i]}" "${news[$i]}"; then
		result="NOT APPLIED: its text is not in $file exactly once (update the row in scripts/mutations.sh)"
		bad=1
	elif run "$pkg" "$test" "$log"; then
		result="SURVIVED"
		bad=1
	elif grep -q "panic: test timed out" "$log"; then
		result="HUNG (timed out after $TIMEOUT)"
		bad=1
	elif grep -q "^--- FAIL: $test " "$log"; then
		result="killed"
	else
		result="BROKEN: no test failed (a build failure?): its log is above"
		bad=1
		tail -20 "$log" >&2
	fi
	cp "$scratch/orig" "$tree/$file"
	table+=$'\n'"| $name | $file | $test | $result |"
	echo "[mutations] $name: $test: $result" >&2
done
echo "$table"
exit $bad
