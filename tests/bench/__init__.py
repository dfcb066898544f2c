"""Tests of the benchmarks' own logic (how they judge and count): docs/benchmarks.md's figures rest on it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (bench/ is not a package: its scripts run by path)."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
