"""The tree passes ruff, and the package passes mypy (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing() -> None:
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                          str(ROOT / "otel_agent_context")],
                         capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
