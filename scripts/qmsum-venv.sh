#!/usr/bin/env bash
# A Python virtual environment for the QMSum evaluation (scripts/qmsum/qmsum_eval.py) at
# target/qmsum-venv, with pinned PyPI packages: sumy (LexRank, TextRank), rouge-score,
# rank-bm25, tiktoken, numpy, and nltk (the stemmers of sumy and rouge-score; no NLTK data
# is downloaded: the harness splits sentences itself). Prints the venv's python on the last
# line. Fails (non-zero) when PyPI cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
make_venv target/qmsum-venv \
  'from importlib.metadata import version as v; assert (v("sumy"), v("rouge-score"), v("rank-bm25"), v("tiktoken"), v("numpy"), v("nltk")) == ("0.13.0", "0.1.2", "0.2.2", "0.14.0", "2.4.6", "3.10.4")' \
  "sumy==0.13.0" "rouge-score==0.1.2" "rank-bm25==0.2.2" "tiktoken==0.14.0" "numpy==2.4.6" "nltk==3.10.4"
