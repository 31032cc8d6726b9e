"""Issue 22 on the operator's side (pure): a node no person approved is refused by placement
(single and sharded) with its reason, its status says AwaitingApproval, each node's keys are its
own, the fleet key flag is checked, and `kubectl mlxfleet approve node` shows and writes exactly
what it should."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator import main
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import candidates
from mlxfleet_operator.core.fleet import groupplacement, placement
from mlxfleet_operator.core.node import status as nodestatus
from mlxfleet_operator.kubectl_plugin import approval

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DELAY = timedelta(seconds=15)
GIB = 2**30
KEY = "k" * 40


def view(name: str, **kw: Any) -> placement.NodeView:
    return placement.NodeView(name=name, budget_bytes=64 * GIB, **kw)


def test_placement_never_picks_an_unapproved_node_and_says_why() -> None:
    request = placement.Request(replicas=2, footprint_bytes=GIB, model=ModelRef("file:///m"))
    rogue = view("rogue", approved=False, labels={"pool": "big"})
    decision = placement.place(
        request, [view("a"), rogue], ["rogue"], now=NOW, failover_delay=DELAY
    )
    assert decision.nodes == ("a",)
    assert decision.dropped == ("rogue",)  # a replica it had (approval withdrawn) goes
    (rejected,) = decision.rejections
    assert (rejected.node, rejected.reason) == ("rogue", placement.Reason.UNAPPROVED)
    assert "kubectl mlxfleet approve node" in decision.rejection_summary()
    assert not candidates.takes(rogue, request)
    alone = placement.place(request, [rogue], [], now=NOW, failover_delay=DELAY)
    assert alone.fits_nowhere  # a person must act


def test_sharded_groups_never_use_an_unapproved_node() -> None:
    request = groupplacement.GroupRequest(
        groups=1, size=2, mode=groupplacement.Mode.TENSOR, weights_bytes=4 * GIB, kv_bytes=GIB,
        overhead_bytes=GIB, num_layers=8, num_kv_heads=8, model=ModelRef("hf://m"),
    )  # fmt: skip
    nodes_ = [view("a"), view("b", approved=False), view("c")]
    decision = groupplacement.place_groups(request, nodes_, [], now=NOW, failover_delay=DELAY)
    assert [sorted(g.nodes) for g in decision.groups] == [["a", "c"]]
    assert ("b", placement.Reason.UNAPPROVED) in {(r.node, r.reason) for r in decision.rejections}


def node_obj(approved: bool | None, **status: Any) -> inode.InferenceNode:
    spec: dict[str, Any] = {"agent": {"url": "https://mac:8470", "tokenSecretRef": {"name": "t"}}}
    if approved is not None:
        spec["approved"] = approved
    return inode.InferenceNode.model_validate(
        {"metadata": {"name": "mac-1", "generation": 3}, "spec": spec, "status": status}
    )


def test_only_false_holds_a_node() -> None:
    assert node_obj(None).approved()  # declared by an admin
    assert node_obj(True).approved()
    assert not node_obj(False).approved()


def test_an_unapproved_node_awaits_a_person_and_keeps_nothing_from_its_agent() -> None:
    old = {"chip": "M2", "slots": [{"name": "x"}], "memory": {"total": "64Gi"}}
    status = nodestatus.awaiting_approval(node_obj(False, **old), now=NOW)
    ready = {c.type: c for c in status.conditions}["Ready"]
    assert (ready.status, ready.reason) == ("False", "AwaitingApproval")
    assert "kubectl mlxfleet approve node mac-1" in ready.message
    assert {c.type: c.status for c in status.conditions}["Reconciling"] == "True"
    assert (status.chip, status.slots, status.memory) == (None, [], None)
    assert status.observed_generation == 3


def test_each_node_gets_keys_of_its_own_and_the_fingerprint_tells_when_to_send() -> None:
    one, two = (
        nodestatus.credentials((KEY,), node_obj(None)),
        contract.credentials.for_node((KEY,), "mac-2"),
    )
    assert set(one.data_plane).isdisjoint(two.data_plane)
    assert set(one.peer).isdisjoint(two.peer)
    assert KEY not in {*one.data_plane, *one.peer}
    rotating = nodestatus.credentials((KEY, "n" * 40), node_obj(None))
    assert rotating.data_plane[0] == one.data_plane[0]  # the current key first
    state = contract.AgentState.model_validate(
        {
            "agentVersion": "1", "os": "x", "chip": "x", "dataPort": 1,
            "startedAt": NOW.isoformat(), "slots": [], "cachedModels": [],
            "memory": {"totalBytes": 1, "availableBytes": 1, "budgetBytes": 1},
            "disk": {"freeBytes": 1, "totalBytes": 1},
        }
    )  # fmt: skip
    assert nodestatus.needs_credentials(state, one)  # an agent without keys
    held = state.model_copy(update={"credentials": contract.credentials.fingerprint(one)})
    assert not nodestatus.needs_credentials(held, one)
    assert nodestatus.needs_credentials(held, rotating)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("", "no key in the file", id="empty"),
        pytest.param("short\n", "at least 32", id="short"),
        pytest.param("x" * 40 + " y\n", "without spaces", id="space"),
        pytest.param("\n".join(["z" * 40] * 5), "at most 4", id="too-many"),
    ],
)
def test_a_bad_fleet_key_file_exits_2_naming_the_flag(
    tmp_path: Path, text: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "key"
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        main.parse(["--standalone", "--fleet-key-file", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"--fleet-key-file {path}" in err
    assert said in err


def test_the_fleet_key_file_is_read_and_may_be_optional(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(f"# current first\n{KEY}\n")
    config = main.parse(["--standalone", "--fleet-key-file", str(path)])
    assert config.fleet_keys == (KEY,)
    assert KEY not in repr(config)
    missing = str(tmp_path / "none")
    assert main.parse(["--standalone", "--fleet-key-file", missing, "--fleet-key-optional"])\
        .fleet_keys == ()  # fmt: skip
    with pytest.raises(SystemExit):
        main.parse(["--standalone", "--fleet-key-file", missing])


def joined(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "mac-9", "annotations": annotations or {}},
        "spec": {"agent": {"url": "https://mac-9:8470"}, "hardware": {"memory": "512Gi"},
                 "approved": False, "unschedulable": True, **spec},
    }  # fmt: skip


def test_approve_node_applies_the_requested_labels_and_shows_what_it_approves() -> None:
    asked = {approval.ANNOTATION: json.dumps({"pool": "big", "mlxfleet.io/room": "lab-2"})}
    node = joined(asked)
    assert approval.waiting(node)
    assert not approval.waiting(joined(approved=True))
    assert not approval.waiting({"spec": {}})
    labels = approval.requested(node)
    assert labels == {"mlxfleet.io/room": "lab-2", "pool": "big"}
    text = "\n".join(approval.summary(node, labels))
    assert "https://mac-9:8470" in text
    assert "512Gi" in text
    assert "pool=big" in text
    assert approval.patch(labels) == {
        "spec": {"approved": True, "unschedulable": False},
        "metadata": {"labels": labels, "annotations": {approval.ANNOTATION: None}},
    }
    assert approval.patch(None) == {"spec": {"approved": True, "unschedulable": False}}
    assert approval.requested(joined()) == {}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("not json", id="not-json"),
        pytest.param('["a"]', id="a-list"),
        pytest.param('{"a": 1}', id="not-a-string"),
        pytest.param('{"bad key!": "x"}', id="bad-key"),
        pytest.param('{"a": "' + "v" * 64 + '"}', id="value-too-long"),
        pytest.param('{"/a": "x"}', id="empty-prefix"),
    ],
)
def test_requested_labels_that_are_not_labels_are_refused_naming_the_annotation(raw: str) -> None:
    with pytest.raises(approval.ApprovalError, match=approval.ANNOTATION):
        approval.requested(joined({approval.ANNOTATION: raw}))
