"""What the console shows, from raw objects as the API server holds them (pure), every template
rendered with them (strict: a name a template does not get fails), and the session cookie."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mlxfleet_gateway.admin import auth, deploymentview, nodeview, session, swapview
from mlxfleet_gateway.console import pages

GIB = 1024**3


def node(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"agent": {"url": f"https://{name}:8443"}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "HeartbeatOK", "message": "ok"},
                {"type": "MemoryPressure", "status": "False", "reason": "MemoryNormal"},
            ],
            "chip": "Apple M2 Ultra",
            "memory": {
                "totalBytes": 64 * GIB,
                "allocatableBytes": 48 * GIB,
                "usedBytes": 20 * GIB,
                "freeBytes": 28 * GIB,
            },
            "slots": [
                {"name": "team-a-chat", "servedName": "chat", "source": "hf://o/chat",
                 "phase": "Ready", "ready": True},
                {"name": "team-a-big", "servedName": "big", "source": "hf://o/big",
                 "phase": "Downloading", "download": {"doneBytes": GIB, "totalBytes": 4 * GIB,
                                                      "bytesPerSecond": 5e7}},
            ],
            "cachedModels": [{"source": "hf://o/chat", "sizeBytes": 12 * GIB}],
            **status,
        },
    }  # fmt: skip


def deployment(name: str, node_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"model": {"source": "hf://o/chat"}, "replicas": 2},
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": "Loading",
                            "message": "1 of 2 replicas ready"}],
            "servedName": name,
            "readyReplicas": 1,
            "estimatedMemoryBytes": 16 * GIB,
            "swapPlan": "chat-x1",
            "placements": [
                {"node": node_name, "phase": "Ready", "ready": True, "slot": f"team-a-{name}"},
                {"node": "m2", "phase": "Loading", "ready": False, "message": "loading weights"},
            ],
        },
    }  # fmt: skip


def test_a_mac_shows_weights_kv_free_and_the_rest_of_its_memory() -> None:
    [n] = nodeview.nodes([node("m1")], [deployment("chat", "m1")])
    assert n.ready is not None
    assert n.ready.reason == "HeartbeatOK"
    bar = n.memory
    assert bar is not None
    assert (bar.weights, bar.kv, bar.free) == (12 * GIB, 8 * GIB, 28 * GIB)
    assert bar.weights + bar.kv + bar.free + bar.other == bar.total
    assert sum(p for *_, p in bar.parts()) == pytest.approx(100)
    assert n.slots[0].deployment == "team-a/chat"
    assert n.slots[1].download is not None
    assert n.slots[1].download.percent == 25
    assert n.models == ["chat", "big"]
    assert not n.thermal.known


def test_a_small_model_on_a_big_mac_is_still_visible_in_the_bar() -> None:
    bar = nodeview.MemoryBar(total=192 * GIB, weights=300_000, kv=0, free=150 * GIB, other=0)
    bar = dataclasses.replace(bar, other=bar.total - bar.weights - bar.free)
    widths = {cls: pct for cls, _, _, pct in bar.parts()}
    assert widths["weights"] == nodeview.MIN_VISIBLE  # 0.0001 % of the bytes
    assert widths["kv"] == 0  # nothing held: not drawn
    assert sum(widths.values()) == pytest.approx(100, abs=0.05)  # each rounded to 0.01
    assert widths["free"] == pytest.approx(100 * 150 / 192 - nodeview.MIN_VISIBLE, abs=0.02)


def test_heat_and_gpu_show_when_the_agent_reports_them() -> None:
    thermal = {"level": "serious", "gpuUtilizationPercent": 87, "gpuTemperatureCelsius": 91,
               "powerWatts": 143.5}  # fmt: skip
    [n] = nodeview.nodes([node("m1", thermal=thermal)], [])
    assert n.thermal == nodeview.Thermal("serious", 87, 91, None, 143.5)
    html = pages.environment().get_template("fleet_live.html").render(nodes=[n])
    assert "thermal serious" in html
    assert "GPU 87%" in html
    assert "143.5 W" in html


def test_objects_that_do_not_parse_still_show() -> None:
    broken = {"metadata": {"name": "odd"}, "status": {"memory": "lots", "slots": [None, 3]}}
    [n] = nodeview.nodes([broken], [{"status": {"placements": "x"}}])
    assert n.memory is None
    assert n.ready is None
    route = {"metadata": {"name": "r", "namespace": "a"}, "spec": {"rules": [{"backends": [{}]}]}}
    [r] = deploymentview.routes([route], {})
    assert r.backends[0].name == "external"


def test_routes_show_weights_and_the_split_in_force() -> None:
    route = {
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {"rules": [{"name": "default", "backends": [
            {"deployment": "a", "weight": 90}, {"deployment": "b", "weight": 10}]}]},
        "status": {"split": [{"rule": "default", "backend": "a", "percent": 100.0},
                             {"rule": "default", "backend": "b", "percent": 0.0}],
                   "backends": [{"rule": "default", "name": "b", "ready": False,
                                 "message": "no ready replica"}]},
    }  # fmt: skip
    live = {"chat": deploymentview.Live(tokens_per_s=12.5, ttft_ms=40.0, requests_per_s=1.0)}
    [r] = deploymentview.routes([route], live)
    assert [(b.name, b.weight, b.percent, b.ready) for b in r.backends] == [
        ("a", 90, 100.0, None),
        ("b", 10, 0.0, False),
    ]
    assert r.live == live["chat"]


def test_plans_waiting_for_approval_come_first() -> None:
    def plan(name: str, phase: str, paused: bool, created: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "a", "creationTimestamp": created},
            "spec": {"deploymentRef": {"name": "chat"}, "target": {"source": "hf://o/m"},
                     "paused": paused},
            "status": {"phase": phase, "progress": "0/2",
                       "steps": [{"node": "m1", "phase": "Loading",
                                  "startedAt": "2026-06-01T10:00:01Z"}]},
        }  # fmt: skip

    shown = swapview.plans(
        [
            plan("old", "Completed", False, "2026-06-01T09:00:00Z"),
            plan("waiting", "Paused", True, "2026-06-01T08:00:00Z"),
            plan("newer", "Progressing", False, "2026-06-01T10:00:00Z"),
        ]
    )
    assert [p.name for p in shown] == ["newer", "waiting", "old"]
    assert shown[1].waiting
    assert not shown[2].waiting
    assert shown[0].steps[0].started == "10:00:01"


def _who() -> auth.Principal:
    return auth.Principal("kube", "system:serviceaccount:a:<script>", token="t")


def test_every_page_renders_and_escapes_what_it_shows() -> None:
    env = pages.environment()
    nodes = nodeview.nodes([node("m1<b>")], [deployment("chat", "m1<b>")])
    deps = deploymentview.deployments([deployment("chat", "m1")], {})
    plans = swapview.plans([])
    common: dict[str, Any] = {
        "page": "fleet", "title": "T", "who": _who(), "csrf": "c", "pages": pages.PAGES,
        "titles": pages.TITLES, "version": "0",
    }  # fmt: skip
    usage = {
        "month": "2026-06", "current": True, "resetsAt": "2026-07-01", "currency": "USD",
        "replicas": 2, "totals": {"promptTokens": 1, "completionTokens": 2, "requests": 1,
                                  "cost": 0.5},
        "byTeam": [], "byKey": [], "byModel": [],
    }  # fmt: skip
    b = {
        "currency": "USD",
        "teams": {"search": {"monthlyBudget": 10.0, "spent": 12.0}},
        "keys": {"k": {"monthlyBudget": 0.0, "spent": 0.0, "refused": True}},
        "prices": {},
    }
    contexts: dict[str, dict[str, Any]] = {
        "fleet.html": {"nodes": nodes, "details": True},
        "deployments.html": {"deployments": deps, "routes": [], "plans": {}},
        "swaps.html": {"plans": plans, "kube": True},
        "usage.html": {"u": usage, "months": ["2026-06"], "b": b},
        "keys.html": {"keys": [], "b": b, "teams_json": "{}", "prices_json": "{}",
                      "namespace": "mlxfleet-system"},
        "playground.html": {},
    }  # fmt: skip
    for template, ctx in contexts.items():
        html = env.get_template(template).render(**common, **ctx)
        assert "<script>" not in html.split("</head>", 1)[1], template
        assert "&lt;script&gt;" in html  # the viewer's name, escaped
    fleet = env.get_template("fleet.html").render(**common, **contexts["fleet.html"])
    assert "m1&lt;b&gt;" in fleet
    assert '<rect class="weights"' in fleet
    login = env.get_template("login.html").render(message="<bad>", title="Log in")
    assert "&lt;bad&gt;" in login


def test_a_session_cookie_opens_only_unchanged_unexpired_and_with_its_key() -> None:
    now = [1000.0]
    key = session.session_key("fleet-key")
    assert key == session.session_key("fleet-key")  # every replica derives the same
    assert key != session.session_key("another")
    sessions = session.Sessions(key, ttl_s=60, clock=lambda: now[0])
    s = sessions.new("kube", "token-of-alice")
    sealed = sessions.seal(s)
    assert "token-of-alice" not in sealed
    assert sessions.open(sealed) == s
    assert sessions.open(sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]) is None
    assert session.Sessions(session.session_key("another")).open(sealed) is None
    assert sessions.open("") is None
    assert sessions.open("%%%") is None
    assert s.csrf_ok(s.csrf)
    assert not s.csrf_ok(None)
    assert not s.csrf_ok(s.csrf + "x")
    now[0] += 61
    assert sessions.open(sealed) is None
    cookie = sessions.set_cookie(s, secure=True).decode()
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert cookie.endswith("; Secure")
