"""Ranks of a sharded group listen on the fabric only and do not wait forever (issue 22 item 7),
on real agents and real mlx_lm ranks.

mlx's ring binds each rank to its own hostfile entry and accepts its left neighbour with no
authentication and no timeout. Ranks listened on the agent's LAN address (the operator put the
agent URL's host in the hostfile) and a rank whose peer never came waited in accept until the
load timeout (300 s). Now an agent runs a rank only on its fabric address (`--fabric-address`;
127.0.0.1 for an agent on loopback) and kills one still waiting for its peers after
`--rank-accept-timeout-s`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlxfleet_operator.dev import processes
from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]
FABRIC = "127.0.0.2"  # another loopback address: a "fabric" interface apart from the agent's


def _rank(model: Path, group: str, rank: int, hosts: list[str]) -> dict[str, Any]:
    shard = {"group": group, "rank": rank, "worldSize": len(hosts), "hosts": hosts}
    return slot_spec(model, "big", shard=shard)


def _listening(agent: Agent) -> set[tuple[str, int]]:
    out = set()
    for proc in agent.backends():
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        out |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return out


def test_a_rank_listens_on_the_fabric_address_only(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory(extra=["--fabric-address", FABRIC])
    assert agent.state()["fabricAddress"] == FABRIC
    ports = processes.free_ports(2)
    lan = [f"127.0.0.1:{p}" for p in ports]  # the agent's own address, as the operator sent
    refused = agent.put_slot("s", _rank(model_a, "g0-1", 0, lan))
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "shard.hosts"
    assert f"is not on this agent's fabric address {FABRIC}" in error["message"]
    fabric = [f"{FABRIC}:{p}" for p in ports]
    assert agent.put_slot("s", _rank(model_a, "g0-2", 0, fabric)).status_code == 202
    deadline = time.monotonic() + 60
    while (FABRIC, ports[0]) not in _listening(agent) and time.monotonic() < deadline:
        time.sleep(0.2)
    listening = _listening(agent)
    assert (FABRIC, ports[0]) in listening, agent.log_tail()
    assert not {a for a in listening if a[1] == ports[0] and a[0] != FABRIC}  # nowhere else


def test_a_rank_whose_peers_never_come_is_stopped_after_the_accept_timeout(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory(extra=["--rank-accept-timeout-s", "5"])
    ports = processes.free_ports(2)  # rank 1 never starts: rank 0 waits in the ring's accept
    hosts = [f"127.0.0.1:{p}" for p in ports]
    started = time.monotonic()
    assert agent.put_slot("s", _rank(model_a, "g0-1", 0, hosts)).status_code == 202
    failed = agent.wait_slot("s", lambda s: s["phase"] == "Failed", timeout_s=60)
    took = time.monotonic() - started
    assert not failed["ready"]
    assert "waited 5 s for its ring peers" in (failed["lastError"] or ""), failed
    assert ("127.0.0.1", ports[0]) not in _listening(agent)
    print(f"\na rank without its peers was stopped {took:.1f} s after its PUT (timeout 5 s)")


def test_an_agent_beyond_loopback_without_a_fabric_address_runs_no_rank(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "data-keys"
    keys.write_text(secrets.token_urlsafe(24) + "\n")
    agent = agent_factory(extra=["--bind", "0.0.0.0", "--data-api-keys-file", str(keys)])
    state = agent.state()
    assert "fabricAddress" in state
    assert state["fabricAddress"] is None
    hosts = [f"127.0.0.1:{p}" for p in processes.free_ports(2)]
    refused = agent.put_slot("s", _rank(model_a, "g0-1", 0, hosts))
    assert refused.status_code == 422, refused.text
    assert "no fabric address (--fabric-address)" in refused.json()["error"]["message"]
