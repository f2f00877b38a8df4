#!/usr/bin/env bash
# A Python virtual environment with the official MCP SDK (PyPI `mcp` 2.3.0), for the test
# in tests/it/mcp.rs that drives `strata mcp` with it (tests/it/drive_mcp_client.py; the
# test finds the venv through STRATA_MCP_PYTHON, or at target/mcp-client-venv). Prints the
# venv's python on the last line; fails (non-zero) when PyPI cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
make_venv target/mcp-client-venv \
  'from importlib.metadata import version; assert version("mcp") == "2.3.0"' \
  "mcp==2.3.0"
