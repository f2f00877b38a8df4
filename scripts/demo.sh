#!/usr/bin/env bash
# The main job on the bundled sample data: ingest a 44-round debate and four State of the
# Union addresses, build all five levels, print a context window and answer questions with
# citations. Offline, no API key. Uses a fresh store in ./strata-demo (removed first).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/strata"
strata() { "$BIN" --db strata-demo "$@"; }
rm -rf strata-demo

step() { printf '\n\033[1m$ strata %s\033[0m\n' "$*"; }
step ingest --scope debate data/debate.jsonl;        strata ingest --scope debate data/debate.jsonl
step ingest --scope sotu data/docs/*.txt;            strata ingest --scope sotu data/docs/*.txt
step compress --scope debate;                        strata compress --scope debate
step compress --scope sotu;                          strata compress --scope sotu
step compress --scope debate "   # again: all cache hits, zero compressor calls"
strata compress --scope debate
step context --scope debate --level auto --budget 800
strata context --scope debate --level auto --budget 800
step query --scope debate "What cost estimate did the 2029 audit give?"
strata query --scope debate "What cost estimate did the 2029 audit give?"
step query --all "What is the first of the four freedoms?"
strata query --all "What is the first of the four freedoms?"
step stats;                                          strata stats
