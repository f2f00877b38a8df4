#!/usr/bin/env bash
# The offline cold build as a user runs it (issue 23's "offline cold build" row):
# `strata ingest` then `strata compress` of the 12 MB State of the Union corpus
# (scripts/fetch-sotu.sh) into a fresh store, with the default offline compressor.
#
#   scripts/bench-build.sh [STRATA_BIN ...]     # default: target/release/strata
#
# With several binaries (say the code before and after a change), the rounds alternate
# between them, so a machine whose speed drifts between hours treats them alike. Prints,
# per binary, the median (and range) of ingest + compress wall time and the MB/s it makes,
# of compress's wall, user and system CPU, ingest's user CPU, the peak resident memory of
# compress and the store's and index's bytes, with the load average before and after.
# ROUNDS=${ROUNDS:-5}. Every command must succeed; outputs are discarded.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -gt 0 ] || set -- "$ROOT/target/release/strata"
ROUNDS="${ROUNDS:-5}"
WORK="$(mktemp -d -t strata-bench-build.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
export STRATA_LOG="${STRATA_LOG:-error}"
unset STRATA_DB STRATA_CONFIG
DIR="$(bash "$ROOT/scripts/fetch-sotu.sh" | tail -n1)"
BYTES=$(cat "$DIR"/*.txt | wc -c)
echo "bench-build: $(ls "$DIR"/*.txt | wc -l) files, $BYTES bytes; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
LOG="$WORK/times"
for r in $(seq "$ROUNDS"); do
    i=0
    for bin in "$@"; do
        i=$((i + 1))
        db="$WORK/db$i"
        rm -rf "$db"
        /usr/bin/time -f "$i ingest %e %U %S %M" "$bin" --db "$db" ingest --scope sotu "$DIR"/*.txt >/dev/null 2>>"$LOG"
        /usr/bin/time -f "$i compress %e %U %S %M" "$bin" --db "$db" compress --scope sotu >/dev/null 2>>"$LOG"
        echo "$i bytes $(du -sb "$db/store" | cut -f1) $(du -sb "$db/index" | cut -f1)" >>"$LOG"
    done
    echo "bench-build: round $r of $ROUNDS done" >&2
done
echo "bench-build: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$LOG" "$BYTES" "$@" <<'EOF'
import statistics, sys
log, total, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = [l.split() for l in open(log) if l.strip()]
def med(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"
for i, b in enumerate(bins, 1):
    mine = [r for r in rows if r[0] == str(i)]
    ing = [r for r in mine if r[1] == "ingest"]
    com = [r for r in mine if r[1] == "compress"]
    size = [r for r in mine if r[1] == "bytes"]
    walls = [float(a[2]) + float(c[2]) for a, c in zip(ing, com)]
    m = statistics.median(walls)
    print(f"{b}")
    print(f"  ingest + compress: {med(walls)} s, {total / m / 1e6:.2f} MB/s at the median")
    print(f"  compress wall {med([float(c[2]) for c in com])} s, user {med([float(c[3]) for c in com])} s, system {med([float(c[4]) for c in com])} s")
    print(f"  ingest user {med([float(a[3]) for a in ing])} s; compress peak RSS {med([int(c[5]) / 1024 for c in com])} MB")
    print(f"  store {med([int(s[2]) / 1e6 for s in size])} MB, index {med([int(s[3]) / 1e6 for s in size])} MB")
EOF
