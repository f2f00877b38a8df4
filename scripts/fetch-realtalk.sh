#!/usr/bin/env bash
# Fetch REALTALK's conversations (Lee et al., 2025, "REALTALK: A 21-Day Real-World Dataset for
# Long-Term Conversation"; github.com/danny911kr/REALTALK) at a pinned commit: the ten
# conversations data/Chat_*.json (two people messaging over 16-26 days, every message timed,
# with memory-probing questions and their human-labelled evidence messages). Only those ten
# files are read: the repository's data/locomo/ (a copy of another benchmark) and
# data/raw/ are not fetched. The data is fetched at run time into a cache and never
# committed. The repository states no licence; it is used for measurement only.
#
#   DIR=$(scripts/fetch-realtalk.sh | tail -n1)     # -> DIR/Chat_*.json
#   REALTALK_DIR=/path/to/REALTALK scripts/fetch-realtalk.sh
#
# Sources, in order:
#   1. $REALTALK_DIR: a clone (bare or not) of the repository holding the pinned commit.
#   2. `git clone` of https://github.com/danny911kr/REALTALK (needs access to github.com).
#   A previously verified copy in the cache is reused.
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/realtalk/COMMIT/.
# - Every run verifies the files: the sha256 of their listing (one line per file, sorted by
#   name: "<sha256 of the file>  <name>\n") must equal the value below.
# - stdout: only the directory (last line); everything else goes to stderr.
# Needs: bash, git, tar, python3. Not part of CI (CI cannot reach github.com).
set -euo pipefail

COMMIT=b903e06a9770bf4e5fe9018c3e132889666d3b4a
URL=https://github.com/danny911kr/REALTALK
WANT=78a7b20e36fd39c39bd60d00d8040f9a1330a9834119f24b068ff9cd994ecfce
COUNT=10

NAME=fetch-realtalk
# shellcheck source=lib/pypi-wheel.sh
source "$(dirname "$0")/lib/pypi-wheel.sh"
CACHE_ROOT="$(cache_root)"
DEST="$CACHE_ROOT/realtalk/$COMMIT"
mkdir -p "$CACHE_ROOT/realtalk"

TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

verify() {
  local got
  got="$(listing_sha "$1")" || return 1
  if [[ "$got" != "$COUNT $WANT" ]]; then
    log "got '$got' (files, sha256), expected '$COUNT $WANT'"
    return 1
  fi
}

# from_git GITDIR OUT: data/Chat_*.json of the pinned commit of GITDIR into OUT.
from_git() {
  local gitdir=$1 out=$2 files
  git -C "$gitdir" cat-file -e "$COMMIT^{commit}" 2>/dev/null || return 1
  files="$(git -C "$gitdir" ls-tree --name-only "$COMMIT" data/ | grep -E '^data/Chat_[0-9]+_[^/]*\.json$')" || return 1
  # shellcheck disable=SC2086
  git -C "$gitdir" archive --format=tar "$COMMIT" $files | tar -x -C "$out" || return 1
  mv "$out"/data/Chat_*.json "$out"/
  rmdir "$out/data"
}

if [[ -f "$DEST/.complete" ]] && verify "$DEST"; then
  log "cached: $DEST"
  printf '%s\n' "$DEST"
  exit 0
fi
rm -rf -- "$DEST"
TMP="$(mktemp -d "$CACHE_ROOT/realtalk/.fetch.XXXXXX")"
mkdir "$TMP/out"
command -v git >/dev/null 2>&1 || die "git is not installed"
if [[ -n "${REALTALK_DIR:-}" ]]; then
  [[ -d "$REALTALK_DIR" ]] || die "REALTALK_DIR=$REALTALK_DIR is not a directory"
  from_git "$REALTALK_DIR" "$TMP/out" || die "REALTALK_DIR=$REALTALK_DIR does not hold commit $COMMIT"
  log "read commit $COMMIT from $REALTALK_DIR"
else
  log "cloning $URL"
  if ! GIT_TERMINAL_PROMPT=0 timeout 600 git clone --quiet --bare --filter=blob:none "$URL" "$TMP/repo.git" >&2 2>/dev/null; then
    die "REALTALK is not available: $URL cannot be cloned from here; set REALTALK_DIR to a clone of it (commit $COMMIT)"
  fi
  from_git "$TMP/repo.git" "$TMP/out" || die "$URL has no commit $COMMIT (or its data could not be read)"
fi
verify "$TMP/out" || die "verification failed: the files differ from commit $COMMIT"
printf '%s\n' "$COMMIT" >"$TMP/out/.complete"
mv "$TMP/out" "$DEST"
log "REALTALK $COMMIT in $DEST"
printf '%s\n' "$DEST"
