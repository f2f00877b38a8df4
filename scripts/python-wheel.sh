#!/usr/bin/env bash
# Builds the `strata` Python wheel (crates/strata-py, maturin, abi3: CPython >= 3.9) with
# the `strata` command inside it, installs it into a fresh venv and runs its pytest suite.
#
#   scripts/python-wheel.sh            # debug build (what CI runs), wheel in target/wheels
#   STRATA_PROFILE=release scripts/python-wheel.sh
#
# Needs PyPI (maturin, pytest) the first time; the build venv is kept in target/py-build.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${STRATA_PROFILE:-debug}"
PY="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-target}"
BUILD=target/py-build
if [[ ! -x $BUILD/bin/maturin ]]; then
  "$PY" -m venv "$BUILD"
  "$BUILD/bin/pip" install -q "maturin>=1.9,<2" "pytest>=8"
fi
if [[ $PROFILE == release ]]; then
  cargo build --locked --release --bin strata
  flags=(--release)
else
  cargo build --locked --bin strata
  flags=(--profile dev)
fi
mkdir -p crates/strata-py/python/strata/bin
cp "$TARGET/$PROFILE/strata" crates/strata-py/python/strata/bin/strata
# Debug symbols would make the wheel ~290 MB.
if command -v strip >/dev/null 2>&1; then strip crates/strata-py/python/strata/bin/strata; fi
rm -rf target/wheels && mkdir -p target/wheels
"$BUILD/bin/maturin" build --locked --strip "${flags[@]}" -m crates/strata-py/Cargo.toml -o target/wheels -i "$BUILD/bin/python"
WHEEL=$(ls target/wheels/strata-*.whl)
echo "wheel: $WHEEL"
# A fresh venv: what `pip install` of the wheel gives a user.
TEST=target/py-test
rm -rf "$TEST"
"$PY" -m venv "$TEST"
"$TEST/bin/pip" install -q "$WHEEL" "pytest>=8"
STRATA_REPO="$PWD" PATH="$PWD/$TEST/bin:$PATH" "$TEST/bin/python" -m pytest -q crates/strata-py/tests
