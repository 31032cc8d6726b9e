"""A status already handed to kopf is not sent again while kopf's body lags our own write
(issue 12: at 500 x 1,000 with nothing changing, 47 InferenceNode and 54 ModelDeployment status
PATCHes a second: each run compared against the body from before its last write and sent the
same status again; a node's heartbeat time moved on every poll for the same reason)."""

from __future__ import annotations

from datetime import timedelta

import kopf

from mlxfleet_operator.adapters import kube
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.handlers import nodes as node_handlers
from tests.unit.operator.builders import NOW, node


def _body(uid: str, rv: str, status: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"uid": uid, "resourceVersion": rv}, "status": status}


def test_the_same_status_against_the_same_version_is_sent_once_then_after_the_resend_time() -> None:
    clock = [0.0]
    status = inode.InferenceNodeStatus(agent_version="2")
    stale = _body("u-resend", "1", {"agentVersion": "1"})

    def write(body: dict[str, object], st: inode.InferenceNodeStatus) -> dict[str, object]:
        patch: dict[str, object] = {}
        kube.write_status(patch, st, body, clock=lambda: clock[0])
        return patch

    def sent(patch: dict[str, object]) -> object:
        found = patch.get("status")
        return found.get("agentVersion") if isinstance(found, dict) else None

    assert sent(write(stale, status)) == "2"
    clock[0] = 5.0
    assert write(stale, status) == {}  # kopf's body has not caught up: already sent
    other = inode.InferenceNodeStatus(agent_version="3")
    assert sent(write(stale, other)) == "3"  # something new: sent
    written = kube.status_patch(status) or {}
    assert sent(write(_body("u-resend", "2", written), other)) == "3"  # a newer body
    clock[0] = 5.0 + kube.STATUS_RESEND_S
    assert sent(write(_body("u-resend", "2", written), other)) == "3"  # lost? sent again
    caught_up = _body("u-resend", "3", kube.status_patch(other) or {})
    assert write(caught_up, other) == {}  # the body shows it: nothing to write


def test_the_heartbeat_time_this_process_wrote_counts_while_the_body_lags() -> None:
    n = node("n1")
    shown = n.model_copy(
        update={"status": n.status.model_copy(update={"last_heartbeat_time": NOW})}
    )
    memo = kopf.Memo()
    assert node_handlers._as_written(shown, memo) is shown  # nothing written yet
    memo["heartbeat_written"] = NOW + timedelta(seconds=60)
    seen = node_handlers._as_written(shown, memo)
    assert seen.status.last_heartbeat_time == NOW + timedelta(seconds=60)
    assert seen.status.conditions == shown.status.conditions  # nothing else replaced
    memo["heartbeat_written"] = NOW - timedelta(seconds=5)  # the body is newer: it counts
    assert node_handlers._as_written(shown, memo) is shown
