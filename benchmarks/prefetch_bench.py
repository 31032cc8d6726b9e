"""SwapPlan with and without prefetch: time from a SwapPlan's creation to `Completed` when the
operator copies the new weights to the plan's nodes as soon as the plan exists (the default)
and with `--no-swap-prefetch` (each node fetches them when its own step starts), in the same run.

Real parts: the local control plane (etcd + kube-apiserver), a SeaweedFS S3 origin, three agents
(`runner1`, `runner2`, `seed`) and `mlxfleet-operator`. A 2-replica ModelDeployment is placed on
the two runners; every round uploads a new model to the origin (a generated tiny llama that
mlx-lm loads, plus a `consolidated.safetensors` of `--gib` GiB that the agent fetches, checks and
sizes like any weights file and mlx-lm does not load, as Mistral's repositories ship one), the
seed fetches it (so a peer holds it and the model is sized before the plan exists), and the
deployment's model changes to it: the operator makes a SwapPlan over both runners. Rounds
alternate prefetch on and off (the operator restarted with the flag between rounds), `--rounds`
pairs; the median of each is reported, with the ratio, the bytes the origin and the peers sent,
and the load average.
Run: `python -m benchmarks.prefetch_bench [--gib 1 --rounds 2]` (`make bench`).
May import: the standard library, httpx, tests.e2e.conftest, tests.support, mlxfleet packages.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.conftest import E2E, Agent, Agents, Operator, is_true, wait_for
from tests.support import s3 as s3_support

from mlxfleet_agent.dev import devmodels
from mlxfleet_operator.dev import controlplane

TOKEN = "benchmark-fleet-peer-token"  # noqa: S105 (a throwaway test secret)
PAD = "consolidated.safetensors"
CHUNK = 64 * 2**20


until = functools.partial(wait_for, timeout=600, interval=0.1)


def pad_file(path: Path, size: int) -> int:
    """A valid safetensors file with one U8 tensor of about `size` bytes; its size."""
    size = max(CHUNK, size // CHUNK * CHUNK)
    header = f'{{"pad": {{"dtype": "U8", "shape": [{size}], "data_offsets": [0, {size}]}}}}'
    head = header.encode() + b" " * (-len(header) % 8)
    chunk = os.urandom(CHUNK)
    with path.open("wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for _ in range(size // CHUNK):
            f.write(chunk)
    return path.stat().st_size


def iso(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def holds(agent: Agent, source: str) -> bool:
    state = agent.state()
    busy = {t["source"] for t in state["transfers"]}
    return source not in busy and any(m["source"] == source for m in state["cachedModels"])


def prefetch(agent: Agent, source: str) -> None:
    headers = {"Authorization": f"Bearer {agent.token}"}
    body = {"source": source}
    resp = httpx.post(f"{agent.url}/v1/models/prefetch", json=body, headers=headers, timeout=30)
    if resp.status_code != 202:
        raise SystemExit(f"prefetch on {agent.name}: {resp.status_code} {resp.text}")


def counters(agent: Agent) -> dict[str, int]:
    return dict(agent.state()["counters"])


def need_disk(base: Path, gib: float, plans: int) -> None:
    """Each plan's model: the origin's copy, the seed's and both runners', with 20% to spare."""
    need = int((plans * 4 + 1) * gib * 2**30 * 1.2)
    free = shutil.disk_usage(base).free
    if free < need:
        raise SystemExit(
            f"--gib {gib} x {plans} plans needs about {need / 2**30:.1f} GiB free under {base}, "
            f"{free / 2**30:.1f} GiB free: ask for less"
        )


def run(gib: float, rounds: int, base: Path) -> dict[str, Any]:
    tiny = devmodels.generate_model(base / "tiny", seed=1)
    pad = base / PAD
    size = pad_file(pad, int(gib * 2**30))
    server = s3_support.start(base / "s3")
    token = base / "peer-token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    bucket = server.make_bucket()

    def upload(prefix: str, *, padded: bool) -> str:
        files = sorted(tiny.iterdir()) + ([pad] if padded else [])
        for path in files:
            server.client().upload_file(str(path), bucket, f"{prefix}/{path.name}")
        return f"s3://{bucket}/{prefix}"

    results: dict[str, Any] = {"weights_bytes": size, "plans": []}
    try:
        with controlplane.running(base / "cp") as plane:
            pool = Agents(root=base / "agents", models_root=base)
            op = Operator(cluster=plane, root=base / "operator")
            try:
                flags = ["--peer-token-file", str(token)]
                env: dict[str, str | None] = dict(server.env())
                runners = [pool.start(f"runner{i}", env=env, flags=flags) for i in (1, 2)]
                seed = pool.start("seed", env=env, flags=flags)
                ws = E2E(cluster=plane, namespace="bench", label="bench")
                plane.kubectl("create", "namespace", "bench")
                names = [ws.register(x) for x in (*runners, seed)]

                def deployment(source: str) -> dict[str, Any]:
                    body = ws.deployment("chat", tiny, replicas=2, placement={"nodes": names[:2]})
                    body["spec"]["model"] = {"source": source}
                    return body

                op.start()
                ws.apply(deployment(upload("start", padded=False)))
                until("deployment Ready", lambda: is_true(ws.get("mdep", "chat"), "Ready"))
                for n in range(2 * rounds):
                    prefetching = n % 2 == 0
                    op.stop()
                    op.start(*([] if prefetching else ["--no-swap-prefetch"]))
                    source = upload(f"r{n}", padded=True)
                    prefetch(seed, source)
                    until("the seed holds the model", functools.partial(holds, seed, source))
                    cached = f"{names[2]} in status.cachedModels"
                    until(cached, functools.partial(source_cached, ws, names[2], source))
                    time.sleep(2)  # the restarted operator has polled every agent
                    results["plans"].append(
                        swap(ws, deployment(source), runners, server, bucket, prefetching)
                    )
                    print(f"plan {n + 1}: {results['plans'][-1]}", file=sys.stderr)
            finally:
                op.stop()
                for agent in pool.started:
                    agent.stop()
    finally:
        server.close()
    return results


def source_cached(ws: E2E, node: str, source: str) -> bool:
    status = ws.get("inode", node, namespaced=False).get("status", {})
    return source in {c["source"] for c in status.get("cachedModels", [])}


def swap(
    ws: E2E,
    manifest: dict[str, Any],
    runners: list[Agent],
    server: s3_support.S3Server,
    bucket: str,
    prefetching: bool,
) -> dict[str, Any]:
    """Change the model, wait for the SwapPlan to complete; its timings and where bytes came
    from."""
    origin_before = server.bytes_sent(bucket)
    peers_before = [counters(r)["peer_bytes_received"] for r in runners]
    t0 = time.monotonic()
    ws.apply(manifest)
    plan = until("plan named", lambda: ws.get("mdep", "chat").get("status", {}).get("swapPlan"))
    seen = time.monotonic()
    phase = until(
        "plan finished",
        lambda: (
            ws.get("swp", plan).get("status", {}).get("phase") in ("Completed", "Failed")
            and ws.get("swp", plan)["status"]["phase"]
        ),
    )
    done = time.monotonic()
    body = ws.get("swp", plan)
    if phase != "Completed":
        raise SystemExit(f"SwapPlan {plan} {phase}: {body.get('status')}")
    created = iso(body["metadata"]["creationTimestamp"])
    completed = iso(body["status"]["completedAt"])
    after = [counters(r)["peer_bytes_received"] for r in runners]
    peers = [a - b for a, b in zip(after, peers_before, strict=True)]
    return {
        "prefetch": prefetching,
        "created_to_completed_s": (completed - created).total_seconds(),
        "seen_to_completed_s": done - seen,
        "apply_to_completed_s": done - t0,
        "origin_bytes": server.bytes_sent(bucket) - origin_before,
        "peer_bytes": sum(peers),
        "requests_failed": sum(s.get("requestsFailed", 0) for s in body["status"]["steps"]),
    }


def render(r: dict[str, Any], gib: float, rounds: int, load: tuple[float, ...]) -> str:
    med = statistics.median
    on = [p for p in r["plans"] if p["prefetch"]]
    off = [p for p in r["plans"] if not p["prefetch"]]

    def row(name: str, plans: list[dict[str, Any]]) -> str:
        created = [p["created_to_completed_s"] for p in plans]
        seen = [p["seen_to_completed_s"] for p in plans]
        origin = med([p["origin_bytes"] for p in plans]) / 2**30
        peers = med([p["peer_bytes"] for p in plans]) / 2**30
        return (
            f"| {name} | {med(created):.1f} ({min(created):.0f}-{max(created):.0f}) "
            f"| {med(seen):.1f} | {origin:.2f} | {peers:.2f} |"
        )

    ratio = med([p["seen_to_completed_s"] for p in off]) / med(
        [p["seen_to_completed_s"] for p in on]
    )
    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join([
        f"SwapPlan over 2 runners, {r['weights_bytes'] / 2**30:.2f} GiB of weights per model, "
        f"{rounds} round(s) each, alternating, {sys.platform}, {os.cpu_count()} CPUs",
        "",
        "| operator | created -> Completed, s (API timestamps, median, min-max) "
        "| seen -> Completed, s (client clock, median) | GiB from the origin | GiB from peers |",
        "|---|---:|---:|---:|---:|",
        row("prefetch (default)", on),
        row("`--no-swap-prefetch`", off),
        "",
        f"without / with prefetch (client clock): {ratio:.2f}x; requests failed: "
        f"{sum(p['requests_failed'] for p in r['plans'])}",
        f"load average (1, 5, 15 min) at the start: {' '.join(f'{x:.2f}' for x in load)}; "
        f"at the end: {end}",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prefetch_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="weights per model (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="plans with and without (2 each)")
    args = parser.parse_args(argv)
    if not (0 < args.gib <= 16 and 1 <= args.rounds <= 10):
        parser.error("--gib in (0, 16], --rounds in 1..10")
    base = Path(tempfile.mkdtemp(prefix="prefetch-bench-"))
    try:
        need_disk(base, args.gib, 2 * args.rounds)
        load = os.getloadavg()
        results = run(args.gib, args.rounds, base)
        print(render(results, args.gib, args.rounds, load))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
