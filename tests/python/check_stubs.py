"""Checks that the checked-in type stubs python/cuactor/_core.pyi are what nanobind's stubgen
generates from the built module (the PythonStubs test). Regenerate with
``cmake --build <build> --target python_stubs``."""

from __future__ import annotations

import difflib
import subprocess
import sys
import tempfile
from pathlib import Path


def main(checked_in: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "_core.pyi"
        subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "cuactor._core", "-o", str(out)],
                       check=True)
        fresh = out.read_text().splitlines(keepends=True)
    old = Path(checked_in).read_text().splitlines(keepends=True) if Path(checked_in).exists() else []
    if fresh == old:
        print(f"{checked_in}: up to date")
        return 0
    sys.stdout.writelines(difflib.unified_diff(old, fresh, checked_in, "stubgen"))
    print(f"\n{checked_in} is out of date: run `cmake --build <build> --target python_stubs` and commit it")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
