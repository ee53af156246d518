"""Every example, run as a subprocess against the fixture nodes, must exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nodes import NodeProcess

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["example1_session_lifecycle.py", "example2_collective_learning.py", "example3_budget_guard.py", "channel.py"]


@pytest.mark.parametrize("script", EXAMPLES)
def test_example_runs(script: str, node_a: NodeProcess, node_b: NodeProcess) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), node_a.rpc, node_b.rpc],
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.rstrip().endswith("ok"), done.stdout


def test_examples_are_all_tested() -> None:
    assert sorted(EXAMPLES) == sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
