"""JSON-RPC calls per second on one connection: through the SDK and through a bare
`websockets` client doing the same JSON-RPC, in the same run, alternating, several rounds.

Each round makes N cheap calls (`guard.getBudgetStatus` of an existing session) with a window
of W calls in flight. Starts its own node (``$AGORA_BIN``, else ``agora`` on PATH) with the
per-connection rate limit raised, or uses ``--url``.

    python bench/calls_per_second.py [--calls 4000] [--window 64] [--rounds 15] [--url ws://…]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect as ws_connect

import agora_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nodes import NodeProcess  # noqa: E402

METHOD = "guard.getBudgetStatus"


async def sdk_round(client: agora_mesh.Client, params: dict[str, Any], calls: int, window: int) -> tuple[float, float]:
    per_worker = [calls // window + (1 if i < calls % window else 0) for i in range(window)]
    status = client.guard.get_budget_status

    async def worker(n: int) -> None:
        for _ in range(n):
            await status(params)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(n) for n in per_worker))
    return calls / (time.perf_counter() - start), (time.process_time() - cpu) / calls * 1e6


async def bare_round(params: dict[str, Any], calls: int, window: int, ws: Any) -> tuple[float, float]:
    def request(i: int) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": i, "method": METHOD, "params": params}, separators=(",", ":"))

    start, cpu = time.perf_counter(), time.process_time()
    sent = received = 0
    while sent < min(window, calls):
        await ws.send(request(sent))
        sent += 1
    while received < calls:
        reply = json.loads(await ws.recv())
        if "result" not in reply:
            raise RuntimeError(f"bare client: {reply}")
        received += 1
        if sent < calls:
            await ws.send(request(sent))
            sent += 1
    return calls / (time.perf_counter() - start), (time.process_time() - cpu) / calls * 1e6


async def run(url: str, calls: int, window: int, rounds: int) -> dict[str, Any]:
    async with agora_mesh.connect(url, max_in_flight=window) as client, ws_connect(url, compression=None) as ws:
        session = await client.state.create_session(agent_name="bench")
        params = {"sessionId": session["sessionId"]}
        await sdk_round(client, params, min(calls, 500), window)  # warm-up
        await bare_round(params, min(calls, 500), window, ws)
        sdk: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        for r in range(rounds):
            order = [("sdk", sdk), ("bare", bare)] if r % 2 == 0 else [("bare", bare), ("sdk", sdk)]
            for name, out in order:
                got = await (sdk_round(client, params, calls, window) if name == "sdk" else bare_round(params, calls, window, ws))
                out.append(got)
        sdk_med, bare_med = statistics.median(x[0] for x in sdk), statistics.median(x[0] for x in bare)
        sdk_cpu, bare_cpu = statistics.median(x[1] for x in sdk), statistics.median(x[1] for x in bare)
        return {
            "method": METHOD,
            "calls_per_round": calls,
            "window": window,
            "rounds": rounds,
            "sdk_calls_per_s": [round(x[0]) for x in sdk],
            "bare_calls_per_s": [round(x[0]) for x in bare],
            "sdk_client_cpu_us_per_call": round(sdk_cpu, 1),
            "bare_client_cpu_us_per_call": round(bare_cpu, 1),
            "sdk_median": round(sdk_med),
            "bare_median": round(bare_med),
            "overhead_percent": round((bare_med / sdk_med - 1.0) * 100.0, 1),
            # Each SDK round against the bare round next to it in time: drifts in the machine's
            # load (other processes) cancel out.
            "overhead_percent_paired": round(statistics.median(b[0] / s[0] - 1.0 for s, b in zip(sdk, bare)) * 100.0, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--url", help="a node's rpc face (default: start one)")
    a = ap.parse_args()
    if a.calls < 1 or a.window < 1 or a.rounds < 1:
        ap.error("--calls, --window and --rounds must be at least 1")
    node = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            url = a.url
            if url is None:
                node = NodeProcess(Path(tmp) / "bench", env={"AGORA_RPC_CONN_RATE": "1000000", "AGORA_RPC_KEY_RATE": "1000000"})
                url = node.rpc
            result = asyncio.run(run(url, a.calls, a.window, a.rounds))
        finally:
            if node is not None:
                node.stop()
    print(json.dumps(result))
    print(
        f"SDK {result['sdk_median']} calls/s, bare websockets {result['bare_median']} calls/s: "
        f"SDK overhead {result['overhead_percent']} % (median of {a.rounds} rounds of {a.calls} calls, {a.window} in flight; "
        f"{result['overhead_percent_paired']} % as the median of adjacent pairs); "
        f"client CPU per call: SDK {result['sdk_client_cpu_us_per_call']} µs, bare {result['bare_client_cpu_us_per_call']} µs"
    )


if __name__ == "__main__":
    main()
