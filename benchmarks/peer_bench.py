"""Peer transfer throughput: a generated model (config.json + several safetensors files, a few
GiB in all) copied Mac to Mac between real agents on loopback, against plain `cp` and one `curl`
of the same bytes from the same peer server (and `curl | tee | md5sum`, since the agent checks
every file's MD5), in the same run; with 1 and 3 source agents; several rounds, median reported.

The origin is a real SeaweedFS S3 server (tests/support/s3.py); the source agents fetch the
model from it first. Each copy lands on a fresh agent (its own models dir) through
`POST /v1/models/prefetch` with `peers`, and is timed from the request until `GET /v1/state`
lists the model as cached (origin LIST, verification, fsync and rename included). The bench
watches for the model's final directory on disk and only then asks the agent (one state call
costs the agent tens of ms of CPU: polling it hard would slow the copy it measures).
Run: `python -m benchmarks.peer_bench [--gib 2 --files 8 --rounds 3]`; prints a table (median
seconds per method, min-max, GiB/s and the ratio to curl) and the load average.
`--compare-agent-src DIR` adds rows for receiving agents run from another checkout's
`node-agent/src` (PYTHONPATH), interleaved with the others in every round, so a change to the
receiving path is compared under the same load.
May import: the standard library, tests.support, tests.integration.agent.conftest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.integration.agent.conftest import Agent, cleanup, start_agent
from tests.support import s3 as s3_support

TOKEN = "benchmark-fleet-peer-token"  # noqa: S105 (a throwaway test secret)
STORE_DIR = (
    ".mlxfleet-store"  # the model store's folder under --models-dir (models.index.STORE_DIR)
)


def make_model(root: Path, *, files: int, file_bytes: int) -> int:
    """config.json plus `files` valid safetensors files of about `file_bytes` each; total bytes."""
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    seed = hashlib.sha256(b"bench").digest() * 32768
    for n in range(files):
        size = file_bytes // len(seed) * len(seed)
        header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
        head = header.encode() + b" " * (-len(header) % 8)
        with (root / f"model-{n:05d}.safetensors").open("wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
            for i in range(size // len(seed)):
                f.write(seed[(i + n) % 11 :] + seed[: (i + n) % 11])
    return sum(p.stat().st_size for p in root.iterdir())


def agent(base: Path, name: str, env: dict[str, str], token_file: Path) -> Agent:
    return start_agent(
        state_dir=base / name / "state",
        models_dir=base / name / "models",
        allowed_root=base,
        log_path=base / name / "agent.log",
        extra=["--peer-token-file", str(token_file)],
        env=env,
    )


def cached(a: Agent, source: str) -> bool:
    state = a.state()
    busy = {t["modelId"] for t in state["transfers"]}
    return any(m["source"] == source and m["id"] not in busy for m in state["cachedModels"])


def fetch_into(a: Agent, source: str, model_id: str, peers: list[Agent]) -> float:
    """Seconds from the prefetch request until the agent lists the model as cached."""
    final = a.models_dir / STORE_DIR / "s3" / model_id
    body = {"source": source, "peers": [p.control_url for p in peers]}
    t0 = time.perf_counter()
    resp = a.api("POST", "/v1/models/prefetch", json=body)
    assert resp.status_code == 202, resp.text
    while not (final.is_dir() and cached(a, source)):
        if a.proc.poll() is not None:
            raise AssertionError(f"agent exited {a.proc.returncode}: see {a.log_path}")
        time.sleep(0.01)  # a stat; the state call only once the directory is there
    return time.perf_counter() - t0


def timed(run: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def model_id(source: str) -> str:
    """The store's id of an S3 source without a revision (models.source.Source.id)."""
    return hashlib.sha256(f"{source}\n".encode()).hexdigest()[:16]


def baselines(
    base: Path, src_dir: Path, url: str, rels: list[str]
) -> list[tuple[str, Callable[[], None]]]:
    """cp of the source agent's copy, one curl of every file on one connection, and curl piped
    through tee and md5sum file by file (like the agent: bytes land on disk and get an MD5)."""
    auth = f"Authorization: Bearer {TOKEN}"
    out = base / "copy"

    def cp() -> None:
        subprocess.run(["cp", "-r", str(src_dir), str(out)], check=True)
        shutil.rmtree(out)

    def curl() -> None:
        out.mkdir()
        cmd = ["curl", "-sSf", "-H", auth]
        for rel in rels:
            cmd += ["-o", str(out / rel), f"{url}/{rel}"]
        subprocess.run(cmd, check=True)
        shutil.rmtree(out)

    def curl_md5() -> None:
        out.mkdir()
        for rel in rels:
            pipe = f"curl -sSf -H '{auth}' '{url}/{rel}' | tee '{out}/{rel}' | md5sum"
            subprocess.run(["sh", "-c", pipe], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(out)

    return [
        ("cp -r (same disk)", cp),
        ("curl, 1 connection, from agent src0", curl),
        ("curl \\| tee \\| md5sum, file by file", curl_md5),
    ]


def report(
    times: dict[str, list[float]],
    *,
    total: int,
    files: int,
    rounds: int,
    load_start: tuple[float, float, float],
) -> None:
    gib = total / 2**30
    curl = statistics.median(times["curl, 1 connection, from agent src0"])
    print(
        f"\npeer transfer: {gib:.2f} GiB in {files} files, loopback, {sys.platform}, "
        f"{os.cpu_count()} CPUs, median of {rounds} round(s)\n"
    )
    print("| method | seconds (median) | min-max | GiB/s | vs curl |\n|---|---:|---:|---:|---:|")
    for name, secs in times.items():
        med = statistics.median(secs)
        print(
            f"| {name} | {med:.2f} | {min(secs):.2f}-{max(secs):.2f} | {gib / med:.2f} "
            f"| {curl / med:.2f} |"
        )
    print("\norigin bytes sent during the peer copies: 0 (SeaweedFS metrics)")
    load = " ".join(f"{x:.2f}" for x in load_start)
    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the start: {load}; at the end: {end}")


def need_disk(base: Path, total: int) -> None:
    """The origin's copy, three sources and one copy at a time, with 20% to spare."""
    need = int(total * 5 * 1.2)
    free = shutil.disk_usage(base).free
    if free < need:
        raise SystemExit(
            f"--gib: {total / 2**30:.2f} GiB needs about {need / 2**30:.1f} GiB free under "
            f"{base}, {free / 2**30:.1f} GiB free: ask for less"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="model size (default 2 GiB)")
    parser.add_argument("--files", type=int, default=8, help="weight files (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, median reported (3)")
    parser.add_argument(
        "--compare-agent-src",
        metavar="DIR",
        help="also time receiving agents run from this node-agent/src (e.g. main's), same rounds",
    )
    args = parser.parse_args()
    if not (0 < args.gib <= 64 and 1 <= args.files <= 256 and 1 <= args.rounds <= 20):
        parser.error("--gib in (0, 64], --files in 1..256, --rounds in 1..20")
    base = Path(tempfile.mkdtemp(prefix="peer-bench-"))
    try:
        need_disk(base, int(args.gib * 2**30))
    except SystemExit:
        base.rmdir()
        raise
    agents: list[Agent] = []
    server = s3_support.start(base / "s3")
    load_start = os.getloadavg()
    try:
        token_file = base / "peer-token"
        token_file.write_text(TOKEN)
        model = base / "gen"
        total = make_model(model, files=args.files, file_bytes=int(args.gib * 2**30 / args.files))
        bucket = server.make_bucket()
        for p in sorted(model.iterdir()):
            server.client().upload_file(str(p), bucket, f"m/{p.name}")
        shutil.rmtree(model)
        source = f"s3://{bucket}/m"
        env = server.env()
        sources = [agent(base, f"src{i}", env, token_file) for i in range(3)]
        agents += sources
        for s in sources:
            fetch_into(s, source, model_id(source), [])
        mid = model_id(source)
        assert sources[0].state()["cachedModels"][0]["id"] == mid, "the store ids models otherwise"
        src_dir = sources[0].models_dir / STORE_DIR / "s3" / mid
        rels = sorted(p.name for p in src_dir.iterdir() if not p.name.startswith("."))
        origin_before = server.bytes_sent(bucket)
        methods = baselines(
            base, src_dir, f"{sources[0].control_url}/peer/v1/models/{mid}/files", rels
        )
        variants = [("", env)]
        if args.compare_agent_src:  # another checkout's agent code for the receiving agents
            other = {**env, "PYTHONPATH": str(Path(args.compare_agent_src).resolve())}
            variants.append((f" [{args.compare_agent_src}]", other))
        for label, dest_env in variants:
            for n in (1, 3):

                def peer_copy(
                    n: int = n, label: str = label, dest_env: dict[str, str] = dest_env
                ) -> None:
                    dest = agent(base, f"dest{n}", dest_env, token_file)
                    agents.append(dest)
                    try:
                        times[f"agent prefetch from {n} peer(s){label}"].append(
                            fetch_into(dest, source, mid, sources[:n])
                        )
                    finally:
                        cleanup(dest)
                        agents.remove(dest)
                        shutil.rmtree(base / f"dest{n}")

                methods.append((f"agent prefetch from {n} peer(s){label}", peer_copy))
        times: dict[str, list[float]] = {name: [] for name, _ in methods}
        for _ in range(args.rounds):
            for name, run in methods:
                if name.startswith("agent"):
                    run()  # times itself: the agent's start-up is not part of the copy
                else:
                    times[name].append(timed(run))
        assert server.bytes_sent(bucket) == origin_before, "a peer copy touched the origin"
        report(times, total=total, files=len(rels), rounds=args.rounds, load_start=load_start)
    finally:
        for a in agents:
            cleanup(a)
        server.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
