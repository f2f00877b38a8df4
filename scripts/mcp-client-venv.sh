#!/usr/bin/env bash
# A Python virtual environment with the official MCP SDK (PyPI `mcp` 2.3.0), for the test
# in tests/it/mcp.rs that drives `strata mcp` with it (tests/it/drive_mcp_client.py finds
# strata through STRATA_MCP_PYTHON, or this venv at target/mcp-client-venv). Prints the
# venv's python on the last line; fails (non-zero) when PyPI cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/mcp-client-venv
want="mcp==2.3.0"
if [[ -x $venv/bin/python ]] && $venv/bin/python - <<'PY' 2>/dev/null; then
from importlib.metadata import version
assert version("mcp") == "2.3.0"
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
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$want" >&2; then
  echo "cannot install $want from PyPI" >&2
  rm -rf "$venv"
  exit 1
fi
echo "$PWD/$venv/bin/python"
