"""What the examples share: the node URLs from argv or the environment, and checks that make
an example exit non-zero when the node does not answer what the spec shows."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

USAGE = "usage: {prog} [RPC_URL_A [RPC_URL_B]]   (or AGORA_RPC_A / AGORA_RPC_B)"


def node_urls(count: int) -> list[str]:
    """The rpc faces of nodes A (and B): argv, else ``AGORA_RPC_A``/``AGORA_RPC_B``."""
    urls = sys.argv[1:] or [u for u in (os.environ.get("AGORA_RPC_A"), os.environ.get("AGORA_RPC_B")) if u]
    if len(urls) < count:
        sys.exit(USAGE.format(prog=os.path.basename(sys.argv[0])))
    return urls[:count]


def show(title: str, value: Any) -> None:
    print(f"{title}\n{json.dumps(value, indent=2, sort_keys=True)}", flush=True)


def check(ok: bool, what: str) -> None:
    """Fails the example (exit 1) when ``ok`` is false."""
    if not ok:
        print(f"FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)
