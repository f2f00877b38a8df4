"""The `strata` command of the wheel: runs the strata binary the wheel carries."""

from __future__ import annotations

import os
import sys


def binary() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "bin", "strata.exe" if os.name == "nt" else "strata")


def main() -> None:
    path = binary()
    if not os.path.isfile(path):
        sys.exit(f"strata: this package was built without the strata command ({path} is missing)")
    os.execv(path, [path, *sys.argv[1:]])
