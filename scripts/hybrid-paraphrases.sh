#!/usr/bin/env bash
# A small paraphrase check of hybrid retrieval on the bundled State of the Union addresses:
# 14 questions worded differently from their answers, asked once with BM25 only and once
# with an embedding model; a question counts when a citation contains the expected phrase
# (alternatives separated by `|`, fixed before the hybrid run).
#
#   cargo build --release --features local-embed
#   scripts/hybrid-paraphrases.sh target/release/strata --embed-model "local:$(scripts/fetch-minilm.sh | tail -n1)"
#   scripts/hybrid-paraphrases.sh target/release/strata --embed-model openai:text-embedding-3-small
#
# Any flags work, not only an embedder: e.g. the LLM navigator against the offline one
# (LABEL names the second mode in the output; default "hybrid"):
#   LABEL=llm scripts/hybrid-paraphrases.sh target/release/strata --root-model openai:local --base-url "$URL"
#
# stdout: OK/MISS per question and per mode with its model calls, whether the navigator
# fell back, and seconds, then each mode's score and means; KEEP=DIR also keeps each answer
# (JSON, with its trajectory) as DIR/MODE-N.json; FROM=i TO=j asks only questions i..j
# (1-based; a slow model). Needs python3.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 STRATA-BINARY --embed-model MODEL [more flags]" >&2; exit 2; }
BIN=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT

QUESTIONS=$(cat <<'EOF'
Which freedom means a worldwide cut in weapons?	freedom from fear
What did the President want to do about schools' web access?	Internet
How does the President plan to help old people pay for doctors?	health care for the aged
Which telegraph line did Lincoln support to reach Europe?	Atlantic telegraph
What volunteer program abroad did Kennedy propose?	Peace Corps
How much of the surplus goes to keeping the health program for seniors solvent?	$400 billion
What will the homestead law do to the land office's income?	sales for cash
Is the nation ahead of Russia in rockets?	lift large vehicles into orbit
What did Lincoln propose to pay slave owners for freeing slaves?	compensated emancipation
Which nations should get American weapons?	munitions|weapons of defense
Which group of uninsured people may purchase Medicare coverage?	55 and 65
What is the jobless rate for women?	female unemployment rate
How many companies helped move people off welfare?	12,000 companies
What are the first two freedoms?	freedom of speech
EOF
)
QUESTIONS=$(awk -v from="${FROM:-1}" -v to="${TO:-999}" 'NR >= from && NR <= to' <<<"$QUESTIONS")

run() { # label, flags...
  local label=$1; shift
  local ok=0 n=0 q want out t0 line
  local stats=()
  while IFS=$'\t' read -r q want; do
    n=$((n + 1))
    t0=$(date +%s.%N)
    local at=$(( ${FROM:-1} + n - 1 ))
    out=$("$BIN" --db "$WORK/db" "$@" --json query --scope sotu "$q")
    if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP"; printf '%s\n' "$out" >"$KEEP/$label-$at.json"; fi
    # "OK|MISS calls fallbacks seconds"
    line=$(python3 -c 'import json, sys, time
r = json.loads(sys.argv[1])
hit = any(w in c["quote"] for w in sys.argv[2].split("|") for c in r["citations"])
u = r.get("usage", {})
print("OK  " if hit else "MISS", u.get("calls", 0), u.get("fallbacks", 0), "%.1f" % (time.time() - float(sys.argv[3])))' "$out" "$want" "$t0")
    read -r verdict calls fell secs <<<"$line"
    [[ $verdict == OK ]] && ok=$((ok + 1))
    stats+=("$calls $fell $secs")
    printf '%s %-4s calls=%s fallback=%s %ss  %s\n' "$label" "$verdict" "$calls" "$fell" "$secs" "$q"
  done <<<"$QUESTIONS"
  printf '%s\n' "${stats[@]}" | awk -v label="$label" -v ok="$ok" -v n="$n" \
    '{c += $1; f += ($2 > 0); s += $3} END {printf "%s: %d / %d; model calls %.1f per query, %d fallback(s), %.1f s per query\n", label, ok, n, c / n, f, s / n}'
}

"$BIN" --db "$WORK/db" ingest --scope sotu "$ROOT"/data/docs/*.txt >&2
"$BIN" --db "$WORK/db" "$@" compress --scope sotu >&2
run bm25
run "${LABEL:-hybrid}" "$@"
