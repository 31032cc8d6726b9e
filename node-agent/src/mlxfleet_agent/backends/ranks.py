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
May import: contract, the standard library. Called by: backends.launcher (environment, watch
intervals), slots (model check, follower start).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from mlxfleet_agent import contract

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
