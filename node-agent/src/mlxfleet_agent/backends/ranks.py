"""One rank of a sharded group: its launch environment and its liveness (mlx.distributed).

mlx's launcher (`mlx.launch`, mlx/_distributed_utils/launch.py) starts every rank itself over
ssh; here each agent starts only its own rank with the same contract:
- ring: `MLX_RANK`, and `MLX_HOSTFILE` naming a JSON file `[["host:port"], ...]` (one list of
  addresses per rank; rank i listens on its entry, the ring connects neighbours);
- jaccl: `MLX_RANK`, `MLX_JACCL_COORDINATOR=host:port` (rank 0's address) and `MLX_IBV_DEVICES`
  naming a JSON file of RDMA device names per peer (a matrix the admin describes; not testable
  on Linux: see docs/sharding.md).
`mlx_lm.server` then loads its share (`sharded_load`: tensor by default, `--pipeline`); rank 0
serves HTTP, the others loop in lockstep. A lost peer makes followers exit and rank 0's
generation thread die (its `/health` turns 503 while the process lives on), so rank 0 is watched
through `/health` (`readiness.watch_health`, as every mlx-lm backend, only faster and with
silence counted) and stopped: no rank keeps running alone. Ranks are never restarted by the
agent alone; the operator re-forms the group with a new group id.

mlx's ring binds each rank to its own hostfile entry and accepts its left neighbour with no
authentication and no timeout. So a rank listens only on this agent's fabric address
(`check_address`: `--fabric-address`, the Thunderbolt bridge, never the LAN the control API is
on), and `guard_accept` kills a rank that still waits in accept after `--rank-accept-timeout-s`
(a peer that never came, or a port an outsider took first): the slot fails and the operator
re-forms the group under a new id, so new ports (docs/sharding.md, "Who can reach the ranks").
May import: contract, psutil, the standard library. Called by: backends.launcher (environment,
watch intervals), slots (model and address checks, follower start, the accept guard).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from mlxfleet_agent import contract

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 0.1  # rank 0's /health (`readiness.watch_health`): a lost peer fails fast
SILENT_LIMIT = 3  # rank 0 silent this many times in a row: its group broke


def hostfile(spec: contract.RankSpec) -> str:
    """The ring hostfile's content: one list of addresses per rank."""
    return json.dumps([[h] for h in spec.hosts])


def environment(spec: contract.RankSpec, *, run_dir: Path) -> dict[str, str]:
    """Environment variables of this rank's process; writes the files they name into `run_dir`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {"MLX_RANK": str(spec.rank), "MLX_WORLD_SIZE": str(spec.world_size)}
    if spec.backend == contract.ShardBackend.RING:
        path = run_dir / f"hostfile-{spec.group}-{spec.rank}.json"
        path.write_text(hostfile(spec))
        env["MLX_HOSTFILE"] = str(path)
    else:
        env["MLX_JACCL_COORDINATOR"] = spec.hosts[0]
        devices = run_dir / f"ibv-{spec.group}-{spec.rank}.json"
        if not devices.exists():  # the admin may place the RDMA device matrix there
            devices.write_text(json.dumps([None] * spec.world_size))
        env["MLX_IBV_DEVICES"] = str(devices)
    return env


def own_address(spec: contract.RankSpec) -> tuple[str, int]:
    """(host, port) this rank listens on: its own entry of `hosts`."""
    host, _, port = spec.hosts[spec.rank].rpartition(":")
    return host.strip("[]"), int(port)


def check_address(spec: contract.RankSpec, fabric: str | None) -> str | None:
    """Why this agent may not run the rank (None: it may): a rank listens on its own `hosts`
    entry, which must be this agent's fabric address."""
    if fabric is None:
        return (
            "this agent has no fabric address (--fabric-address): it runs no rank of a sharded "
            "group (mlx's ring accepts any peer that connects, so ranks listen on the fabric "
            "network only)"
        )
    host, _ = own_address(spec)
    if host != fabric:
        return (
            f"shard.hosts[{spec.rank}] {spec.hosts[spec.rank]} is not on this agent's fabric "
            f"address {fabric} (--fabric-address): a rank listens there only"
        )
    return None


def _accepting(pid: int, port: int) -> bool | None:
    """True while the process listens on `port` (mlx's ring, waiting in accept), False once it
    does not, None when it is gone."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return False  # cannot tell: never kill on a guess
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


async def guard_accept(
    *,
    pid: Callable[[], int | None],
    alive: Callable[[], bool],
    kill: Callable[[str], None],
    spec: contract.RankSpec,
    timeout_s: float,
    interval_s: float = 0.25,
) -> None:
    """Kill the rank if it still waits for a ring peer `timeout_s` after it began to listen
    (mlx's accept has no timeout: a peer that never comes would hold the slot forever; the
    time before, its start-up, is the load timeout's). Returns once the rank stopped listening
    (it accepted its peer), exited, or was killed."""
    host, port = own_address(spec)
    deadline: float | None = None  # set when it is first seen waiting in accept
    while alive():
        now = pid()
        listening = None if now is None else await asyncio.to_thread(_accepting, now, port)
        if listening is None or (deadline is not None and not listening):
            return
        if listening and deadline is None:
            deadline = time.monotonic() + timeout_s
        if deadline is not None and time.monotonic() >= deadline:
            kill(
                f"rank {spec.rank} of group {spec.group} waited {timeout_s:g} s for its ring "
                f"peers at {host}:{port} (--rank-accept-timeout-s); stopped"
            )
            return
        await asyncio.sleep(interval_s)


def check_model(spec: contract.RankSpec, config: dict[str, object]) -> str | None:
    """Why this model cannot be split this way (None: it can), from its config.json."""
    kv_heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
    tensor = spec.mode == contract.ShardMode.TENSOR
    if tensor and isinstance(kv_heads, int) and kv_heads % spec.world_size:
        return (
            f"tensor sharding splits KV heads: num_key_value_heads {kv_heads} is not "
            f"divisible by {spec.world_size} ranks"
        )
    return None


def read_config(model_dir: Path) -> dict[str, object]:
    try:
        data = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


async def follower_started(*, alive: Callable[[], bool], settle_s: float = 1.0) -> None:
    """A follower counts as up once it is still running after `settle_s` (it has no HTTP)."""
    await asyncio.sleep(settle_s)
    if not alive():
        raise OSError("rank process exited at start")
