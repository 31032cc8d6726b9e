"""Peer transfer throughput: a generated model (config.json + several GB-scale safetensors
files) copied Mac to Mac between real agents on loopback, against plain `cp` and one `curl` of
the same bytes from the same peer server (and `curl | md5sum`, since the agent checks every
file's MD5), in the same run; with 1 and 3 source agents.

The origin is a real SeaweedFS S3 server (tests/support/s3.py); the source agents fetch the
model from it first. Each copy lands on a fresh agent (its own models dir) through
`POST /v1/models/prefetch` with `peers`, and is timed from the request until the model is
cached (origin LIST, verification and fsync included). Run: `python -m benchmarks.peer_bench
[--gib 1.0 --files 4]`; prints a table and the ratios.
May import: the standard library, tests.support, tests.integration.agent.conftest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.agent.conftest import Agent, cleanup, start_agent
from tests.support import s3 as s3_support

TOKEN = "benchmark-fleet-peer-token"  # noqa: S105 (a throwaway test secret)


def make_model(root: Path, *, files: int, file_bytes: int) -> int:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    seed = hashlib.sha256(b"bench").digest() * 32768
    total = 0
    for n in range(files):
        size = file_bytes // len(seed) * len(seed)
        header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
        head = header.encode() + b" " * (-len(header) % 8)
        with (root / f"model-{n:05d}.safetensors").open("wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
            for i in range(size // len(seed)):
                f.write(seed[(i + n) % 11 :] + seed[: (i + n) % 11])
    for p in root.iterdir():
        total += p.stat().st_size
    return total


def agent(base: Path, name: str, env: dict[str, str], token_file: Path) -> Agent:
    return start_agent(
        state_dir=base / name / "state",
        models_dir=base / name / "models",
        allowed_root=base,
        log_path=base / name / "agent.log",
        extra=["--peer-token-file", str(token_file)],
        env=env,
    )


def fetch_into(a: Agent, source: str, peers: list[Agent]) -> float:
    body = {"source": source, "peers": [p.control_url for p in peers]}
    t0 = time.perf_counter()
    resp = a.api("POST", "/v1/models/prefetch", json=body)
    assert resp.status_code == 202, resp.text
    while True:
        state = a.state()
        busy = {t["modelId"] for t in state["transfers"]}
        if any(m["source"] == source and m["id"] not in busy for m in state["cachedModels"]):
            return time.perf_counter() - t0
        time.sleep(0.1)  # GET /v1/state costs tens of ms of the agent's CPU: do not poll hard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="model size (default 1 GiB)")
    parser.add_argument("--files", type=int, default=4, help="weight files (default 4)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="peer-bench-"))
    agents: list[Agent] = []
    server = s3_support.start(base / "s3")
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
            fetch_into(s, source, [])
        mid = sources[0].state()["cachedModels"][0]["id"]
        src_dir = next(p for p in sources[0].models_dir.rglob(mid) if p.is_dir())
        rels = sorted(p.name for p in src_dir.iterdir() if not p.name.startswith("."))
        origin_before = server.bytes_sent(bucket)

        rows: list[tuple[str, float]] = []
        t0 = time.perf_counter()
        subprocess.run(["cp", "-r", str(src_dir), str(base / "cp-copy")], check=True)
        rows.append(("cp -r (same disk)", time.perf_counter() - t0))
        shutil.rmtree(base / "cp-copy")

        (base / "curl").mkdir()
        cmd = ["curl", "-sSf", "-H", f"Authorization: Bearer {TOKEN}"]
        for rel in rels:
            url = f"{sources[0].control_url}/peer/v1/models/{mid}/files/{rel}"
            cmd += ["-o", str(base / "curl" / rel), url]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        rows.append(("curl, 1 connection, from agent src0", time.perf_counter() - t0))
        shutil.rmtree(base / "curl")

        (base / "curl").mkdir()
        t0 = time.perf_counter()
        for rel in rels:  # the like-for-like baseline: the agent checks every file's MD5
            url = f"{sources[0].control_url}/peer/v1/models/{mid}/files/{rel}"
            auth = f"Authorization: Bearer {TOKEN}"
            pipe = f"curl -sSf -H '{auth}' '{url}' | tee '{base}/curl/{rel}' | md5sum"
            subprocess.run(["sh", "-c", pipe], check=True, stdout=subprocess.DEVNULL)
        rows.append(("curl | tee | md5sum, file by file", time.perf_counter() - t0))
        shutil.rmtree(base / "curl")

        for n in (1, 3):
            dest = agent(base, f"dest{n}", env, token_file)
            agents.append(dest)
            rows.append((f"agent prefetch from {n} peer(s)", fetch_into(dest, source, sources[:n])))
            cleanup(dest)
            shutil.rmtree(base / f"dest{n}" / "models")
        assert server.bytes_sent(bucket) == origin_before, "a peer copy touched the origin"

        curl = rows[1][1]
        print(
            f"\npeer transfer: {total / 2**30:.2f} GiB in {len(rels)} files, loopback, "
            f"{sys.platform}\n"
        )
        print("| method | seconds | GiB/s | vs curl |\n|---|---:|---:|---:|")
        for name, secs in rows:
            print(f"| {name} | {secs:.2f} | {total / 2**30 / secs:.2f} | {curl / secs:.2f} |")
        print("\norigin bytes sent during the peer copies: 0 (SeaweedFS metrics)")
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for a in agents:
            cleanup(a)
        server.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
