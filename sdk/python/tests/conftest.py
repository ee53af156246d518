"""Fixtures: real nodes, shared by the whole session (two meshed nodes A and B)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from nodes import NodeProcess, agora_bin, eventually, meshed_pair  # noqa: E402

#: Trajectories of this task type are shared between the fixture nodes (spec Example 2).
NODE_ENV = {"AGORA_IMPROVING_SHARE": "true", "AGORA_IMPROVING_TASK_TYPES": "web-research"}


#: The fixtures that need a node binary; tests without them run anyway.
NEEDS_NODE = {"mesh", "node_a", "node_b", "agora_binary"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if agora_bin() is not None:
        return
    if os.environ.get("AGORA_REQUIRE_EXTERNAL") == "1":
        raise pytest.UsageError("no agora binary (set AGORA_BIN), and AGORA_REQUIRE_EXTERNAL=1 makes that a failure")
    skip = pytest.mark.skip(reason="no agora binary: set AGORA_BIN or put agora on PATH")
    for item in items:
        if NEEDS_NODE & set(getattr(item, "fixturenames", ())):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def agora_binary() -> str:
    """The node binary (tests that start their own nodes take this fixture)."""
    found = agora_bin()
    assert found is not None
    return found


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory, agora_binary: str) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    a, b = meshed_pair(tmp_path_factory.mktemp("mesh"), env=NODE_ENV)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture(scope="session")
def node_a(mesh: tuple[NodeProcess, NodeProcess]) -> NodeProcess:
    return mesh[0]


@pytest.fixture(scope="session")
def node_b(mesh: tuple[NodeProcess, NodeProcess]) -> NodeProcess:
    return mesh[1]


__all__ = ["eventually"]
