#!/usr/bin/env bash
# A Python virtual environment with aragora's own SDK (aragora-sdk 2.11.0, unmodified) and
# openapi-spec-validator from PyPI, for tests/it/aragora_sdk.rs (which finds it at
# target/aragora-sdk-venv). Prints the venv's python on the last line. Fails (non-zero)
# when the packages cannot be had (PyPI unreachable): the test then skips with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
make_venv target/aragora-sdk-venv \
  'from importlib.metadata import version; assert version("aragora-sdk") == "2.11.0"; import openapi_spec_validator' \
  "aragora-sdk==2.11.0" openapi-spec-validator
