#!/usr/bin/env bash
# Fetch QMSum (Zhong et al., NAACL 2021: meeting transcripts with query-based human
# summaries; github.com/Yale-LILY/QMSum, MIT licence) at a pinned commit: the three splits
# of data/ALL (train 162, val 35, test 35 meetings, one JSON file each). The data is fetched
# at run time into a cache and never committed.
#
#   DIR=$(scripts/fetch-qmsum.sh | tail -n1)     # -> DIR/{train,val,test}/*.json
#   QMSUM_DIR=/path/to/QMSum scripts/fetch-qmsum.sh
#
# Sources, in order:
#   1. $QMSUM_DIR: a clone (bare or not) of the repository holding the pinned commit (the
#      files are read from that commit), or else a directory holding data/ALL/{split}/.
#   2. `git clone` of https://github.com/Yale-LILY/QMSum, checked out at the pinned commit
#      (needs access to github.com).
#   A previously verified copy in the cache is reused.
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/qmsum/COMMIT/{train,val,test}.
# - Every run verifies each split: the sha256 of its listing (one line per file, sorted by
#   name: "<sha256 of the file>  <name>\n") must equal the value below; any missing, extra
#   or changed file fails the run (exit 1).
# - stdout: only the directory (last line); everything else goes to stderr.
# Needs: bash, git, tar, python3. Not part of CI (CI cannot reach github.com).
# Env: QMSUM_DIR, STRATA_CACHE, PYTHON (interpreter for hashing, default python3).
set -euo pipefail

COMMIT=83d7768c1f2b4dfeb091385d3dc7e239b8e5bb7e
URL=https://github.com/Yale-LILY/QMSum
SPLITS=(train val test)
declare -A WANT=(
  [train]=78251a4fd331d1a2c142a3a186d9855ebcf2685aeb00b79230dd2b03feaaf861
  [val]=8c380c6369954943eeff6302157b43ae68e14b26fdd81e7f4e942c14db95a8eb
  [test]=9ce568f73fb7e398a7353a0ce17a9ffb4b1f0cde854769f25b8330df993978c6
)
declare -A COUNT=([train]=162 [val]=35 [test]=35)

NAME=fetch-qmsum
# shellcheck source=lib/pypi-wheel.sh
source "$(dirname "$0")/lib/pypi-wheel.sh"
CACHE_ROOT="$(cache_root)"
DEST="$CACHE_ROOT/qmsum/$COMMIT"
mkdir -p "$CACHE_ROOT/qmsum"

TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

# verify DIR: prints nothing, fails with the first mismatch on stderr.
verify() {
  local dir=$1 split got
  for split in "${SPLITS[@]}"; do
    [[ -d "$dir/$split" ]] || { log "no directory $dir/$split"; return 1; }
    got="$(listing_sha "$dir/$split")" || return 1
    if [[ "$got" != "${COUNT[$split]} ${WANT[$split]}" ]]; then
      log "$split: got '$got' (files, sha256), expected '${COUNT[$split]} ${WANT[$split]}'"
      return 1
    fi
  done
}

# from_git GITDIR OUT: the splits of the pinned commit of GITDIR into OUT/{split}.
from_git() {
  local gitdir=$1 out=$2 split err
  git -C "$gitdir" cat-file -e "$COMMIT^{commit}" 2>/dev/null || return 1
  err="$(mktemp)"
  if ! git -C "$gitdir" archive --format=tar "$COMMIT" data/ALL/train/ data/ALL/val/ data/ALL/test/ \
      2>"$err" | tar -x -C "$out"; then
    cat "$err" >&2
    rm -f "$err"
    return 1
  fi
  rm -f "$err"
  for split in "${SPLITS[@]}"; do
    mv "$out/data/ALL/$split" "$out/$split"
  done
  rm -rf "$out/data"
}

# from_tree DIR OUT: copies DIR/data/ALL/{split} into OUT/{split}.
from_tree() {
  local src=$1 out=$2 split
  for split in "${SPLITS[@]}"; do
    [[ -d "$src/data/ALL/$split" ]] || return 1
  done
  for split in "${SPLITS[@]}"; do
    cp -R "$src/data/ALL/$split" "$out/$split"
  done
}

if [[ -f "$DEST/.complete" ]] && verify "$DEST"; then
  log "cached: $DEST"
  printf '%s\n' "$DEST"
  exit 0
fi
rm -rf -- "$DEST"
TMP="$(mktemp -d "$CACHE_ROOT/qmsum/.fetch.XXXXXX")"
mkdir "$TMP/out"
if [[ -n "${QMSUM_DIR:-}" ]]; then
  [[ -d "$QMSUM_DIR" ]] || die "QMSUM_DIR=$QMSUM_DIR is not a directory"
  command -v git >/dev/null 2>&1 || die "git is not installed"
  if from_git "$QMSUM_DIR" "$TMP/out"; then
    log "read commit $COMMIT from $QMSUM_DIR"
  elif rm -rf "$TMP/out" && mkdir "$TMP/out" && from_tree "$QMSUM_DIR" "$TMP/out"; then
    log "copied $QMSUM_DIR/data/ALL"
  else
    die "QMSUM_DIR=$QMSUM_DIR holds neither commit $COMMIT nor data/ALL/{train,val,test}"
  fi
else
  command -v git >/dev/null 2>&1 || die "git is not installed"
  log "cloning $URL"
  if ! GIT_TERMINAL_PROMPT=0 timeout 600 git clone --quiet --bare "$URL" "$TMP/repo.git" >&2 2>/dev/null; then
    die "QMSum is not available: $URL cannot be cloned from here; set QMSUM_DIR to a clone of it (commit $COMMIT)"
  fi
  from_git "$TMP/repo.git" "$TMP/out" || die "$URL has no commit $COMMIT (or its data/ALL could not be read)"
fi
verify "$TMP/out" || die "verification failed: the files differ from commit $COMMIT"
printf '%s\n' "$COMMIT" >"$TMP/out/.complete"
mv "$TMP/out" "$DEST"
log "QMSum $COMMIT in $DEST"
printf '%s\n' "$DEST"
