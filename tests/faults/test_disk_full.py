"""Scenario 5: the disk of an agent's models dir fills up in the middle of a model download from
S3, while the same agent serves another deployment under load.

The download fails with a clear error in the deployment's status (it names the disk), no partial
model is ever used or listed, the other deployment keeps serving (0 failed requests), and once
space returns the download completes and the deployment becomes Ready. The agent's own answer to
the download that hit ENOSPC is checked too: HTTP 507 naming the disk (it was a 500 before
models/s3.download mapped ENOSPC to InsufficientDisk)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from mlxfleet_agent.models import source as msource
from tests.e2e.conftest import Agent, condition, is_true, wait_for
from tests.faults import disk
from tests.faults.steps import Fleet
from tests.support import tcpproxy
from tests.support.s3 import S3Server

pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.s3,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        sys.platform != "linux" or os.geteuid() != 0, reason="mounting a loop disk needs root"
    ),
]

# The agent keeps 2 GiB free (models/store.DEFAULT_MIN_FREE_BYTES): a disk a little larger passes
# its check before the download; filling it afterwards makes the download itself hit ENOSPC.
DISK_MB = 2200
LEAVE = 64 * 1024  # room for the small files, not for the weights


def upload(s3_server: S3Server, bucket: str, model: Path, prefix: str) -> str:
    for path in sorted(model.iterdir()):
        s3_server.client().upload_file(str(path), bucket, f"{prefix}/{path.name}")
    return f"s3://{bucket}/{prefix}"


def prefetch_during_fill(
    agent: Agent, store: tcpproxy.Proxy, small: disk.Disk, source: str
) -> httpx.Response:
    """POST /v1/models/prefetch (what the operator sends) and fill the disk once the download
    has started (listing done, first object held): the agent's answer to ENOSPC."""
    store.delay(0.5, count=2)
    seen = store.delayed
    answer: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answer.append(
            httpx.post(
                f"{agent.url}/v1/models/prefetch",
                json={"source": source},
                headers={"Authorization": f"Bearer {agent.token}"},
                timeout=30,
            )
        )
    )
    asking.start()
    wait_for("the download started", lambda: store.delayed >= seen + 2, interval=0.02)
    small.fill(LEAVE)
    asking.join(timeout=60)
    return answer[0]


def test_disk_full_during_download_is_reported_and_recovers(
    fleet: Fleet,
    s3_server: S3Server,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    e2e, agents = fleet.e2e, fleet.agents
    bucket = s3_server.make_bucket()
    source = upload(s3_server, bucket, model_b, "chat-b")
    other = upload(s3_server, bucket, model_a, "chat-a")
    host, port = s3_server.endpoint_url.removeprefix("http://").rsplit(":", 1)
    store = tcpproxy.Proxy(host, int(port))
    env: dict[str, str | None] = {
        **s3_server.env(),
        "AWS_ENDPOINT_URL_S3": f"http://{store.address}",
        "AWS_ENDPOINT_URL": f"http://{store.address}",
    }
    with disk.small_disk(agents.root / "d" / "models", size_mb=DISK_MB) as small:
        agent = agents.start("d", env=env)
        node = e2e.register(agent)
        fleet.operators.start("op-1", standalone=True)
        fleet.deploy("steady", model_a, replicas=1)
        with fleet.traffic("steady") as load:
            store.delay(1.0, count=3)  # hold the listing and the first download request
            fresh = e2e.deployment("fresh", model_b, replicas=1)
            fresh["spec"]["model"] = {"source": source}
            e2e.apply(fresh)
            wait_for("the download started", lambda: store.delayed >= 2, interval=0.05)
            small.fill(LEAVE)
            filled = time.time()
            failing = wait_for(
                "status names the full disk",
                lambda: (
                    (c := condition(e2e.get("mdep", "fresh"), "Ready")).get("reason")
                    == "SourceUnavailable"
                    and "disk" in c.get("message", "")
                    and c
                ),
                timeout=30,
            )
            reported = time.time()
            time.sleep(3)  # retried meanwhile: still failing, nothing half-downloaded used
            mid = msource.parse(source, None).id
            cached = {m["id"]: m for m in agent.state()["cachedModels"]}
            complete = small.mount / ".mlxfleet-store" / "s3" / mid
            still = condition(e2e.get("mdep", "fresh"), "Ready")
            was_complete = complete.exists()
            small.free()
            freed = time.time()
            wait_for("fresh Ready", lambda: is_true(e2e.get("mdep", "fresh"), "Ready"), timeout=120)
            recovered = time.time()
            time.sleep(1)
        figures.update(
            scenario="5 disk full during a model download",
            reported_s=round(reported - filled, 2),
            message=failing.get("message"),
            recovered_s=round(recovered - freed, 2),
            requests_ok=load.ok,
            requests_failed=load.failed,
        )
        assert node in str(failing.get("message"))
        assert mid not in cached or cached[mid]["sizeBytes"] == 0, cached.get(mid)
        assert not was_complete
        assert still.get("reason") == "SourceUnavailable"
        assert load.failed == 0, load.errors[:5]
        assert load.lost() == 0
        assert all(s["ready"] for s in agent.state()["slots"])
        for path in model_b.iterdir():  # the weights that serve are whole
            assert (complete / path.name).stat().st_size == path.stat().st_size
        answer = prefetch_during_fill(agent, store, small, other)
        small.free()
        store.stop()
        figures["agent_answer_to_enospc"] = f"{answer.status_code} {answer.text[:120]}"
        assert answer.status_code == 507, answer.text[:200]
        assert "no space left" in answer.text, answer.text[:200]
        assert "disk full" in answer.text, answer.text[:200]
