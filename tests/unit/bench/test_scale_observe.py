"""What the scale benchmark reads from object watches and the operator's log: which object
writes changed what outside status (kopf's bookkeeping annotations), and the log's ERROR kinds."""

from __future__ import annotations

from typing import Any

from benchmarks.scale import observe


def _obj(name: str, annotations: dict[str, str], *, gen: int = 1, fin: int = 1) -> dict[str, Any]:
    meta = {"name": name, "annotations": annotations, "generation": gen}
    return {"metadata": meta | {"finalizers": ["mlxfleet.io/finalizer"] * fin}}


def test_changes_count_each_annotation_write_and_ignore_status_only_events() -> None:
    changes = observe.Changes()
    seen = changes.seen("ModelDeployment")
    seen("ADDED", _obj("a", {}, fin=0), 0.0)
    seen("MODIFIED", _obj("a", {}), 0.0)  # finalizer added
    seen("MODIFIED", _obj("a", {"mlxfleet.io/changed": '{"retries":1}'}), 0.0)
    seen("MODIFIED", _obj("a", {"mlxfleet.io/changed": '{"retries":2}'}), 0.0)
    seen("MODIFIED", _obj("a", {"mlxfleet.io/changed": '{"retries":2}'}), 0.0)  # status only
    seen("MODIFIED", _obj("a", {"mlxfleet.io/last-handled-configuration": "{}"}, gen=2), 0.0)
    assert changes.snapshot() == {
        "ModelDeployment finalizers": 1,
        "ModelDeployment annotation mlxfleet.io/changed set": 1,
        "ModelDeployment annotation mlxfleet.io/changed changed": 1,
        "ModelDeployment annotation mlxfleet.io/changed removed": 1,
        "ModelDeployment annotation mlxfleet.io/last-handled-configuration set": 1,
        "ModelDeployment spec": 1,
    }


def test_changes_name_the_status_fields_and_conditions_that_changed() -> None:
    changes = observe.Changes()
    seen = changes.seen("md")
    ready = {"type": "Ready", "status": "False", "reason": "Loading", "message": "0/1"}
    seen("ADDED", _obj("a", {}) | {"status": {"replicas": 1, "conditions": [ready]}}, 0.0)
    now = {**ready, "status": "True", "message": "1/1"}
    seen("MODIFIED", _obj("a", {}) | {"status": {"replicas": 1, "conditions": [now]}}, 0.0)
    seen("MODIFIED", _obj("a", {}) | {"status": {"replicas": 2, "conditions": [now]}}, 0.0)
    assert changes.snapshot() == {
        "md status.conditions[Ready].message": 1,
        "md status.conditions[Ready].status": 1,
        "md status.replicas": 1,
    }


def test_log_kinds_group_kopf_failures_without_names() -> None:
    log = "\n".join(
        [
            "2026-11-27 00:00:01 ERROR kopf.objects Handler 'changed' failed temporarily: "
            "waiting for the first poll of mac-0001, mac-0002",
            "2026-11-27 00:00:02 ERROR kopf.objects Handler 'changed' failed temporarily: "
            "waiting for the first poll of mac-0417",
            "2026-11-27 00:00:03 ERROR kopf.objects Timer 'converge' failed with an exception "
            "and will try again in 5.0 seconds: boom",
            "2026-11-27 00:00:04 INFO kopf.objects Handler 'changed' succeeded.",
            "2026-11-27 00:00:05 ERROR asyncio Task exception was never retrieved",
        ]
    )
    assert observe.log_kinds(log) == [
        ("handler changed failed temporarily: waiting for the first poll of *", 2),
        ("timer converge failed with an exception: boom", 1),
        ("asyncio Task exception was never retrieved", 1),
    ]


def test_event_reasons_count_what_arrived_in_the_window_by_kind_and_reason() -> None:
    """The steady window's Event POSTs: late Events of the convergence (Ready, Loading) or
    new ones; an Event's creation is when the API server took it, whatever it says of itself."""

    def ev(created: str, kind: str, reason: str) -> dict[str, Any]:
        meta = {"creationTimestamp": created}
        return {"metadata": meta, "involvedObject": {"kind": kind}, "reason": reason}

    items = [
        ev("2026-11-28T18:13:59Z", "ModelDeployment", "Ready"),  # before the window
        ev("2026-11-28T18:14:00Z", "ModelDeployment", "Ready"),
        ev("2026-11-28T18:14:30Z", "ModelDeployment", "Ready"),
        ev("2026-11-28T18:14:31Z", "InferenceNode", "NodeReady"),
        {"metadata": {"creationTimestamp": "2026-11-28T18:15:00Z"}},  # nothing named
    ]
    assert observe.event_reasons(items, since="2026-11-28T18:14:00Z") == [
        ("ModelDeployment Ready", 2),
        ("InferenceNode NodeReady", 1),
        ("? ?", 1),
    ]


def test_requests_the_api_server_refused_count_apart_by_code() -> None:
    text = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="200",resource="mds",subresource="",verb="PATCH"} 3',
            'apiserver_request_total{code="422",resource="mds",subresource="",verb="PATCH"} 2',
            'apiserver_request_total{code="409",resource="services",subresource="",verb="POST"} 1',
            'apiserver_request_total{code="201",resource="services",subresource="",verb="POST"} 4',
            'apiserver_request_total{code="200",resource="x",subresource="status",verb="PATCH"} 1',
            'apiserver_request_total{code="200",resource="x",subresource="status",verb="PATCH"} 1',
        ]
    )
    counts = observe.parse_requests(text)
    assert counts == {
        ("PATCH", "mds", ""): 3,
        ("PATCH", "mds", "[422]"): 2,
        ("POST", "services", "[409]"): 1,
        ("POST", "services", ""): 4,
        ("PATCH", "x", "status"): 2,
    }
    assert observe.writes(counts) == 12  # refused writes are writes the fleet paid for
    assert ("PATCH mds/[422]", 2) in observe.top_requests(counts)
