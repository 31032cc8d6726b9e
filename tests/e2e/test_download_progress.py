"""Download progress reaches `kubectl get`: a ~10 MB model in a real S3 server (SeaweedFS),
fetched by a real agent paced to about 1 MiB/s (`--download-max-bytes-per-s`), shows its bytes
done/total, percentage and rate in `kubectl get mdep -o wide` (the Message column), first while
the operator has the model fetched to size it (SizeUnknown), then, for a deployment whose memory
is given, while the slot itself downloads (Loading; placements[].download, the InferenceNode's
slots[].download). Both end Ready and answer."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_agent.dev import devmodels
from tests.e2e.conftest import E2E, Agents, Operator, condition, is_true, wait_for
from tests.support.s3 import S3Server

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.s3, pytest.mark.timeout(400)]

RATE = 1024 * 1024  # bytes/s: a ~10 MB model takes ~10 s, several operator polls
PROGRESS = re.compile(r"downloading ([\d.]+)/([\d.]+) MiB \((\d+)%, ([\d.]+) MiB/s\) on (\S+)")


def upload(s3: S3Server, bucket: str, prefix: str, model: Path) -> int:
    size = 0
    for path in sorted(model.iterdir()):
        s3.client().upload_file(str(path), bucket, f"{prefix}/{path.name}")
        size += path.stat().st_size
    return size


def watch_wide(e2e: E2E, name: str, *, until_ready: float = 180.0) -> list[str]:
    """Every distinct `kubectl get mdep NAME -o wide` line until the deployment is Ready."""
    seen: list[str] = []
    deadline = time.monotonic() + until_ready
    while time.monotonic() < deadline:
        line = e2e.kubectl("get", "mdep", name, "-n", e2e.namespace, "-o", "wide", "--no-headers")
        if not seen or seen[-1] != line.strip():
            seen.append(line.strip())
        if is_true(e2e.get("mdep", name), "Ready"):
            return seen
        time.sleep(0.3)
    raise AssertionError(f"{name} not Ready in {until_ready:.0f}s; kubectl said: {seen}")


def progress_of(lines: list[str], node: str) -> list[tuple[float, float, int, float]]:
    out = []
    for line in lines:
        if (m := PROGRESS.search(line)) is not None:
            assert m.group(5) == node, line
            out.append((float(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))))
    return out


def assert_progress_seen(got: list[tuple[float, float, int, float]], size: int) -> None:
    """At least two distinct partial figures, growing, the right total and a plausible rate."""
    assert len({p for _, _, p, _ in got if p < 100}) >= 2, got
    percents = [p for _, _, p, _ in got]
    assert percents == sorted(percents), got
    assert {round(total, 2) for _, total, _, _ in got} == {round(size / 2**20, 2)}, got
    rates = [r for *_, r in got if r > 0]
    assert rates, got
    assert max(rates) <= 2 * RATE / 2**20, got  # paced: never far above the cap


def test_download_progress_is_visible_in_kubectl_get(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    s3_server: S3Server,
    tmp_path: Path,
) -> None:
    bucket = s3_server.make_bucket()
    big_a = devmodels.generate_model(tmp_path / "big-a", seed=5, hidden_size=256, num_layers=8)
    big_b = devmodels.generate_model(tmp_path / "big-b", seed=6, hidden_size=256, num_layers=8)
    size_a = upload(s3_server, bucket, "big-a", big_a)
    size_b = upload(s3_server, bucket, "big-b", big_b)
    assert size_a > 8 * RATE
    agent = agents.start(
        "mac-1", env=dict(s3_server.env()), flags=["--download-max-bytes-per-s", str(RATE)]
    )
    node = e2e.register(agent)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))

    # 1. nobody knows the size: the operator has the model fetched on the node to size it
    sized: dict[str, Any] = e2e.deployment("sized", big_a, replicas=1)
    sized["spec"]["model"]["source"] = f"s3://{bucket}/big-a"
    e2e.apply(sized)
    header = e2e.kubectl("get", "mdep", "sized", "-n", e2e.namespace, "-o", "wide")
    assert "MESSAGE" in header.splitlines()[0], header
    lines = watch_wide(e2e, "sized")
    assert any("SizeUnknown" in line for line in lines), lines
    assert_progress_seen(progress_of(lines, node), size_a)

    # 2. memory given: no sizing, the slot downloads while the replica loads
    loading: dict[str, Any] = e2e.deployment("loading", big_b, replicas=1)
    loading["spec"]["model"]["source"] = f"s3://{bucket}/big-b"
    loading["spec"]["resources"] = {"memory": "1Gi"}
    e2e.apply(loading)

    def downloading_placement() -> dict[str, Any] | None:
        md = e2e.get("mdep", "loading")
        placed = (md.get("status") or {}).get("placements") or [{}]
        return md if placed[0].get("download") else None

    md = wait_for("a placement with download progress", downloading_placement, interval=0.2)
    placement = md["status"]["placements"][0]
    assert placement["download"]["bytesTotal"] == size_b
    assert 0 <= placement["download"]["bytesDone"] <= size_b
    assert placement["message"].startswith("downloading "), placement
    ready = condition(md, "Ready")
    assert ready["reason"] == "Loading"
    assert f" on {node}" in ready["message"]
    inode_slots = wait_for(
        "the InferenceNode's slot download",
        lambda: [
            s
            for s in (e2e.get("inode", node, namespaced=False).get("status") or {}).get("slots", [])
            if s.get("download")
        ],
        interval=0.2,
    )
    assert inode_slots[0]["download"]["bytesTotal"] == size_b
    lines = watch_wide(e2e, "loading")
    assert any("Loading" in line for line in lines), lines
    assert_progress_seen(progress_of(lines, node), size_b)
    done = e2e.get("mdep", "loading")
    assert "download" not in done["status"]["placements"][0]
    assert condition(done, "Ready")["message"] == "1/1 replicas ready"
    state = agent.state()
    assert all("download" not in s or s["download"] is None for s in state["slots"])
    operator.assert_alive()
