#!/usr/bin/env bash
# A Python virtual environment with aragora's own SDK (aragora-sdk 2.11.0, unmodified) and
# openapi-spec-validator from PyPI, for tests/it/aragora_sdk.rs (which finds it at
# target/aragora-sdk-venv). Prints the venv's python on the last line. Fails (non-zero)
# when the packages cannot be had (PyPI unreachable): the test then skips with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/aragora-sdk-venv
want="aragora-sdk==2.11.0"
if [[ -x $venv/bin/python ]] && $venv/bin/python - <<'PY' 2>/dev/null; then
from importlib.metadata import version
assert version("aragora-sdk") == "2.11.0"
import openapi_spec_validator  # noqa: F401
PY
  echo "$PWD/$venv/bin/python"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "python3 is not installed" >&2
  exit 1
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  # Debian splits venv/ensurepip out of python3.
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq python3-venv) >&2 || true
  fi
fi
rm -rf "$venv"
mkdir -p target
python3 -m venv "$venv" >&2
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$want" openapi-spec-validator >&2; then
  echo "cannot install $want and openapi-spec-validator from PyPI" >&2
  rm -rf "$venv"
  exit 1
fi
echo "$PWD/$venv/bin/python"
