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
# stdout: OK/MISS per question and per mode, then the two scores. Needs python3.
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

run() { # label, flags...
  local label=$1; shift
  local ok=0 n=0 q want out
  while IFS=$'\t' read -r q want; do
    n=$((n + 1))
    out=$("$BIN" --db "$WORK/db" "$@" --json query --scope sotu "$q")
    if python3 -c 'import json, sys
r = json.loads(sys.argv[1])
sys.exit(0 if any(w in c["quote"] for w in sys.argv[2].split("|") for c in r["citations"]) else 1)' "$out" "$want"; then
      ok=$((ok + 1)); echo "$label OK   $q"
    else
      echo "$label MISS $q"
    fi
  done <<<"$QUESTIONS"
  echo "$label: $ok / $n"
}

"$BIN" --db "$WORK/db" ingest --scope sotu "$ROOT"/data/docs/*.txt >&2
"$BIN" --db "$WORK/db" "$@" compress --scope sotu >&2
run bm25
run hybrid "$@"
