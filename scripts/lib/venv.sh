# Sourced by scripts/*-venv.sh: makes (or reuses) a Python virtual environment under
# target/ with pinned PyPI packages, and prints its python on the last line.
#   make_venv DIR CHECK PACKAGE...
# DIR is reused when `DIR/bin/python -c CHECK` succeeds (CHECK asserts the pinned
# versions); otherwise it is made afresh. Fails (non-zero) when PyPI cannot be reached.
make_venv() {
  local venv=$1 check=$2
  shift 2
  if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "$PWD/$venv/bin/python"
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    echo "python3 is not installed" >&2
    return 1
  fi
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    # Debian splits venv/ensurepip out of python3.
    if command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && apt-get install -y -qq python3-venv) >&2 || true
    fi
  fi
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2; then
    echo "cannot install $* from PyPI" >&2
    rm -rf "$venv"
    return 1
  fi
  echo "$PWD/$venv/bin/python"
}
