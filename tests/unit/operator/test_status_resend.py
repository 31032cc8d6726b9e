"""A status already handed to kopf is not sent again while kopf's body lags our own write
(issue 12: at 500 x 1,000 with nothing changing, 47 InferenceNode and 54 ModelDeployment status
PATCHes a second: each run compared against the body from before its last write and sent the
same status again; a node's heartbeat time moved on every poll for the same reason)."""

from __future__ import annotations

from datetime import timedelta

from mlxfleet_operator.adapters import objects, statuspatch
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.handlers import nodes as node_handlers
from tests.unit.operator.builders import NOW, node


def _body(uid: str, rv: str, status: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"uid": uid, "resourceVersion": rv}, "status": status}


def test_the_same_status_against_the_same_version_is_sent_once_until_the_body_moves() -> None:
    clock = [0.0]
    status = inode.InferenceNodeStatus(agent_version="2")
    stale = _body("u-resend", "1", {"agentVersion": "1"})
    kept = objects.Objects()

    def write(body: dict[str, object], st: inode.InferenceNodeStatus) -> dict[str, object]:
        patch: dict[str, object] = {}
        statuspatch.write_status(patch, st, body, kept, clock=lambda: clock[0])
        return patch

    def sent(patch: dict[str, object]) -> object:
        found = patch.get("status")
        return found.get("agentVersion") if isinstance(found, dict) else None

    assert sent(write(stale, status)) == "2"
    clock[0] = 5.0
    assert write(stale, status) == {}  # kopf's body has not caught up: already sent
    clock[0] = 120.0  # minutes behind (a saturated operator): still the version it was sent on
    assert write(stale, status) == {}
    other = inode.InferenceNodeStatus(agent_version="3")
    assert sent(write(stale, other)) == "3"  # something new: sent
    written = statuspatch.status_patch(status) or {}
    assert sent(write(_body("u-resend", "2", written), other)) == "3"  # a newer body
    clock[0] = 120.0 + statuspatch.STATUS_RESEND_S
    assert sent(write(_body("u-resend", "2", written), other)) == "3"  # lost? sent again
    caught_up = _body("u-resend", "3", statuspatch.status_patch(other) or {})
    assert write(caught_up, other) == {}  # the body shows it: nothing to write


def test_the_heartbeat_time_this_process_wrote_counts_while_the_body_lags() -> None:
    n = node("n1")
    shown = n.model_copy(
        update={"status": n.status.model_copy(update={"last_heartbeat_time": NOW})}
    )
    kept = objects.ObjectState()
    assert node_handlers._as_written(shown, kept) is shown  # nothing written yet
    kept.heartbeat_written = NOW + timedelta(seconds=60)
    seen = node_handlers._as_written(shown, kept)
    assert seen.status.last_heartbeat_time == NOW + timedelta(seconds=60)
    assert seen.status.conditions == shown.status.conditions  # nothing else replaced
    kept.heartbeat_written = NOW - timedelta(seconds=5)  # the body is newer: it counts
    assert node_handlers._as_written(shown, kept) is shown


def _conditions(at: int, ready: str = "True") -> inode.InferenceNodeStatus:
    def c(kind: str, status: str) -> cond.Condition:
        return cond.Condition(
            type=kind,
            status=cond.ConditionStatus(status),
            last_transition_time=NOW + timedelta(seconds=at),
            reason="Ready" if status == "True" else "Progressing",
        )

    other = "False" if ready == "True" else "True"
    return inode.InferenceNodeStatus(conditions=[c("Ready", ready), c("Reconciling", other)])


def _times(patch: dict[str, object]) -> dict[str, str]:
    status = patch["status"]
    assert isinstance(status, dict)
    return {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}


def test_a_body_without_our_last_conditions_does_not_move_their_transition_times() -> None:
    """kopf's body from before our last write (here: no status at all) makes every condition
    look new, so each run stamped `now` on all of them: a real PATCH every time that changed
    nothing but lastTransitionTime (55 a second at 500 x 1,000). The times this process last
    sent are kept while a condition's status is the same; a real transition gets its own."""
    bare = _body("u-times", "1", {})
    kept = objects.Objects()

    def write(st: inode.InferenceNodeStatus, at: float) -> dict[str, object]:
        patch: dict[str, object] = {}
        statuspatch.write_status(patch, st, bare, kept, clock=lambda: at)
        return patch

    first = _times(write(_conditions(0), 0.0))
    assert write(_conditions(5), 5.0) == {}  # same statuses, the body lags: nothing new
    assert write(_conditions(40), 40.0) == {}  # still the version it was sent on
    later = statuspatch.STATUS_RESEND_S + 10.0
    assert _times(write(_conditions(int(later)), later)) == first  # resent, with the first times
    flipped = _times(write(_conditions(50, ready="False"), later + 10.0))
    changed = _times({"status": statuspatch.status_patch(_conditions(50, ready="False"))})
    assert flipped == changed  # Ready and Reconciling both flipped: their own new times
