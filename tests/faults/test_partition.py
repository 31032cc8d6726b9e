"""Scenario 3: a network partition of one agent. The agent runs in its own network namespace
joined to the host by a veth pair; the link is cut while clients stream through the
EndpointSlices (host) and straight to the agent (inside the namespace), then healed.

While cut off the agent keeps serving its local clients (0 failures there); the operator marks
the node NotReady after its missed polls and re-places the replica after the failover delay;
host clients fail only on the cut-off agent, only until its endpoint is withdrawn. On heal the
node is Ready again, its stale slot is removed, the replica stays where it moved (no flapping)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlxfleet_operator.core.kit import naming
from tests.faults import netns
from tests.faults.steps import Fleet, assert_routed_around, lose_and_return

pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        sys.platform != "linux" or os.geteuid() != 0, reason="ip netns needs Linux and root"
    ),
]


def test_partitioned_agent_serves_locally_is_replaced_and_cleaned_up_on_heal(
    fleet: Fleet, figures: dict[str, object], model_a: Path, tmp_path: Path
) -> None:
    with netns.namespace() as net:
        # beyond loopback (in its namespace) and keyless, as its clients are: open on purpose
        cut_off = fleet.agents.start(
            "p", host=net.inner_ip, prefix=net.exec_prefix, flags=["--allow-open-data-plane"]
        )
        kept = fleet.agents.start("b")
        fleet.e2e.register(cut_off)
        nb = fleet.e2e.register(kept)
        fleet.elect_two()
        fleet.deploy("chat", model_a)
        spare, nc = fleet.add_node("c")
        local_out = tmp_path / "local-load.json"
        local = subprocess.Popen(
            [
                *net.exec_prefix, sys.executable, "-m", "tests.e2e.loadgen",
                "--base-url", cut_off.data_url, "--model", "chat", "--out", str(local_out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

        def stop_local_clients() -> None:  # before the heal: then the operator deletes the slot
            local.send_signal(signal.SIGTERM)
            local.wait(timeout=60)

        out = lose_and_return(
            fleet, lost=cut_off, lose=net.cut, restore=net.heal, before_restore=stop_local_clients
        )
        inside = json.loads(local_out.read_text())
        figures.update(
            scenario="3 network partition of one agent",
            **out.figures(),
            host_requests_ok=out.load.ok,
            host_requests_failed=out.load.failed,
            local_requests_ok=inside["ok"],
            local_requests_failed=inside["failed"],
        )
        assert inside["failed"] == 0, inside["outcomes"][-3:]
        assert inside["started"] == len(inside["outcomes"])  # none lost
        assert [o for o in inside["outcomes"] if out.lost_at < o["started"] < out.restored_at]
        slot = naming.slot_name(fleet.e2e.namespace, "chat")
        assert_routed_around(
            out, lost=cut_off, pool=[cut_off, kept, spare], slot=slot, moved_to=[nb, nc]
        )
        assert out.reasons.count("NodeReady") <= 2, out.reasons  # first contact, the return
        cut_off.stop()
