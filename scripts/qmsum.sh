#!/usr/bin/env bash
# The QMSum evaluation in one command (docs/EVAL.md, "QMSum"): fetch the data
# (scripts/fetch-qmsum.sh: $QMSUM_DIR, else a clone of github.com/Yale-LILY/QMSum at the
# pinned commit; sha256-verified), make the Python venv (scripts/qmsum-venv.sh), build
# strata (debug; STRATA_PROFILE=release for a release build), and run
# scripts/qmsum/qmsum_eval.py. The Markdown table goes to stdout, the results JSON to
# --out (default target/qmsum-work/results-SPLIT.json), progress to stderr.
#
#   QMSUM_DIR=/path/to/QMSum scripts/qmsum.sh --split val
#   scripts/qmsum.sh --split val --limit 5 --budgets 500,1000
#   scripts/qmsum.sh --split val --for-impl bm25-sentences     # mock --for (not strata)
#
# Develop on val; the test split is reported once, at the end. Extra arguments go to
# qmsum_eval.py (--split, --limit, --budgets, --workdir, --out, --for-impl, --seed, ...).
# Not part of CI: it needs github.com (or QMSUM_DIR) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="$(scripts/fetch-qmsum.sh | tail -n1)"
PY="$(scripts/qmsum-venv.sh | tail -n1)"
PROFILE="${STRATA_PROFILE:-debug}"
if [[ "$PROFILE" == release ]]; then
  cargo build --locked --release --quiet
else
  cargo build --locked --quiet
fi
exec "$PY" scripts/qmsum/qmsum_eval.py --data "$DATA" --strata "target/$PROFILE/strata" \
  --workdir target/qmsum-work "$@"
