"""The hollow agent answers like the real one: the same requests, in the same order, against a
real `mlxfleet-agent serve` (mlx-lm backends on generated tiny models) and a hollow node give
the same status codes, the same response shapes (every field, its JSON type) and the same values
where they are not inherently different (ports, timings, pids, ids, versions are)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.agent.conftest import cleanup, start_agent
from tests.integration.hollow.conftest import HollowFleet
from tests.support import models as support_models

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(400)]
BUDGET = 6 * 1024**3
WAIT_S = 90.0
# paths whose value may be null on one side and a string on the other
NULLABLE = {"mlxVersion", "mlxLmVersion"}
# objects whose keys are implementation details (compared as "some mapping")
OPAQUE = {"counters"}


@dataclass
class Target:
    name: str
    url: str
    token: str

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def until(self, what: str, path: str, check: Callable[[httpx.Response], bool]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            r = self.call("GET", path)
            if check(r):
                return r
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {what} never happened; last {r.status_code} {r.text}")


def shape(value: Any, path: str = "") -> Any:
    """The JSON type of every field (lists: the shapes of their elements, de-duplicated)."""
    key = path.rsplit(".", 1)[-1]
    if key in OPAQUE:
        return "mapping"
    if isinstance(value, dict):
        return {k: shape(v, f"{path}.{k}") for k, v in sorted(value.items())}
    if isinstance(value, list):
        found: list[Any] = []
        for item in value:
            s = shape(item, path + "[]")
            if s not in found:
                found.append(s)
        return found
    if key in NULLABLE:
        return "str-or-null"
    return {bool: "bool", int: "number", float: "number", str: "str"}.get(type(value), "null")


def same_shape(real: Any, hollow: Any, what: str) -> None:
    assert shape(real) == shape(hollow), f"{what}:\nreal   {real}\nhollow {hollow}"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, model_a: Path, model_b: Path, broken_model: Path
) -> Iterator[tuple[Target, Target]]:
    from tests.integration.hollow import conftest as hollow

    root = support_models.models_root(tmp_path_factory)
    base = tmp_path_factory.mktemp("contract")
    agent = start_agent(
        state_dir=base / "state",
        models_dir=base / "models",
        allowed_root=root,
        log_path=base / "agent.log",
        extra=["--memory-budget", str(BUDGET)],
    )
    fleet: HollowFleet | None = None
    try:
        fleet = hollow.start(
            [
                "--nodes=1",
                f"--allowed-root={root}",
                f"--memory-budget={BUDGET}",
                f"--fail-source={broken_model}",
                "--load-s=0.5",
                "--warm-s=0.2",
            ],
            base / "hollow",
        )
        node = fleet.nodes[0]
        yield (
            Target("real", agent.control_url, agent.token),
            Target("hollow", node["url"], node["token"]),
        )
    finally:
        cleanup(agent)
        if fleet is not None:
            hollow.stop(fleet)


@pytest.fixture(scope="module")
def serving(pair: tuple[Target, Target], model_a: Path) -> tuple[Target, Target]:
    """Slot `a` serves model_a as tiny-a on both (the first test checks how it got there)."""
    for target in pair:
        if target.call("GET", "/v1/slots/a").status_code == 404:
            assert (
                target.call("PUT", "/v1/slots/a", json=spec(model_a, "tiny-a")).status_code == 202
            )
        target.until("slot a ready", "/v1/slots/a", ready)
    return pair


def both(
    pair: tuple[Target, Target], method: str, path: str, **kwargs: Any
) -> tuple[httpx.Response, httpx.Response]:
    real, hollow = (t.call(method, path, **kwargs) for t in pair)
    what = f"{method} {path}"
    assert real.status_code == hollow.status_code, f"{what}: {real.text} / {hollow.text}"
    if real.content or hollow.content:
        same_shape(real.json(), hollow.json(), what)
    if real.status_code >= 400:
        r, h = real.json()["error"], hollow.json()["error"]
        assert (r.get("field"), "allowed" in r) == (h.get("field"), "allowed" in h), what
    return real, hollow


def spec(model: Path, served: str, **extra: Any) -> dict[str, Any]:
    return {"source": f"file://{model}", "servedName": served, **extra}


def ready(r: httpx.Response) -> bool:
    return r.status_code == 200 and r.json()["ready"] and r.json()["phase"] == "Ready"


def test_the_same_requests_get_the_same_answers(
    pair: tuple[Target, Target], model_a: Path, model_b: Path, broken_model: Path
) -> None:
    for target in pair:  # no token, wrong token: 401 naming the header, before anything else
        assert httpx.get(target.url + "/v1/state", timeout=10).status_code == 401
        assert httpx.get(target.url + "/healthz", timeout=10).json() == {"status": "ok"}
        wrong = httpx.get(
            target.url + "/v1/state", headers={"Authorization": "Bearer nope"}, timeout=10
        )
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == "Bearer"
        assert wrong.json() == {
            "error": {"field": "authorization", "message": "missing or wrong bearer token"}
        }
    both(pair, "GET", "/v1/state")
    both(pair, "GET", "/v1/slots/a")  # 404
    r, h = both(pair, "PUT", "/v1/slots/a", json=spec(model_a, "tiny-a"))
    assert (r.status_code, r.json()["source"]) == (202, h.json()["source"])
    r, h = (t.until("slot a ready", "/v1/slots/a", ready) for t in pair)
    same_shape(r.json(), h.json(), "ready slot")
    both(pair, "PUT", "/v1/slots/a", json=spec(model_a, "tiny-a"))  # identical: a no-op
    state_r, state_h = both(pair, "GET", "/v1/state")
    assert [s["phase"] for s in state_r.json()["slots"]] == ["Ready"]
    assert [s["phase"] for s in state_h.json()["slots"]] == ["Ready"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        pytest.param("/v1/slots/b", b"{not json", 400, id="bad-json"),
        pytest.param("/v1/slots/b", b"[1, 2]", 422, id="not-an-object"),
        pytest.param("/v1/slots/b", b"", 422, id="no-body"),
        pytest.param("/v1/slots/Not_A_Label", b"{}", 422, id="slot-name"),
        pytest.param("/v1/slots/" + "a" * 64, b"{}", 422, id="slot-name-too-long"),
        pytest.param("/v1/slots/b", b'{"source": "x"}', 422, id="missing-field"),
        pytest.param("/v1/slots/b", b" " * (1024 * 1024 + 1), 413, id="too-large"),
    ],
)
def test_malformed_bodies_are_refused_alike(
    pair: tuple[Target, Target], path: str, body: bytes, status: int
) -> None:
    r, _ = both(pair, "PUT", path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status


def test_refusals_name_the_same_field(
    serving: tuple[Target, Target], model_a: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pair = serving
    root = support_models.models_root(tmp_path_factory)
    cases = [
        (spec(model_a, "tiny-a"), 409),  # served name taken by slot a
        ({**spec(model_a, "b"), "extra": 1}, 422),
        ({**spec(model_a, "b"), "contextLength": "big"}, 422),
        ({"source": "ftp://host/m", "servedName": "b"}, 422),
        ({"source": "file:///etc", "servedName": "b"}, 403),
        ({"source": f"file://{root}/missing", "servedName": "b"}, 404),
        ({**spec(model_a, "b"), "memoryBytes": 100 * 1024**3}, 507),
    ]
    for body, status in cases:
        r, h = both(pair, "PUT", "/v1/slots/b", json=body)
        assert r.status_code == status, body
        if status == 507:
            assert (
                set(r.json())
                == set(h.json())
                == {
                    "error",
                    "estimateBytes",
                    "budgetBytes",
                    "freeBytes",
                }
            )
            assert r.json()["budgetBytes"] == h.json()["budgetBytes"] == BUDGET
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v1/state"), ("GET", "/v1/slots/b")):
        both(pair, method, path)


def test_models_prefetch_and_eviction(serving: tuple[Target, Target], model_b: Path) -> None:
    pair = serving
    r, h = both(pair, "POST", "/v1/models/prefetch", json={"source": f"file://{model_b}"})
    assert r.json()["id"] == h.json()["id"]
    r, h = both(pair, "GET", "/v1/models")
    in_use = {m["source"]: m["inUse"] for m in r.json()["items"]}
    assert in_use == {m["source"]: m["inUse"] for m in h.json()["items"]}
    busy = next(m["id"] for m in r.json()["items"] if m["inUse"])
    both(pair, "DELETE", f"/v1/models/{busy}")  # 409: slot a uses it
    both(pair, "DELETE", "/v1/models/no-such-model")  # 404
    both(pair, "DELETE", "/v1/models/bad id!")  # 422


def test_swaps_and_rollback_are_recorded_alike(
    serving: tuple[Target, Target], model_b: Path, broken_model: Path
) -> None:
    pair = serving
    both(pair, "PUT", "/v1/slots/a?requestId=bad%20id!", json=spec(model_b, "tiny-a"))  # 422
    # the operator matches a SwapPlan step to the record that echoes its requestId
    both(pair, "PUT", "/v1/slots/a?requestId=plan-1.step-0", json=spec(model_b, "tiny-a"))
    done = (t.until("swap to b", "/v1/slots/a/swaps", _finished(1)) for t in pair)
    r, h = (x.json()["items"][0] for x in done)
    same_shape(r, h, "swap record")
    assert (r["strategy"], r["outcome"]) == (h["strategy"], h["outcome"]) == ("surge", "Completed")
    assert r["requestId"] == h["requestId"] == "plan-1.step-0"
    both(pair, "PUT", "/v1/slots/a", json=spec(broken_model, "tiny-a"))
    done = (t.until("rollback", "/v1/slots/a/swaps", _finished(2)) for t in pair)
    r, h = (x.json()["items"][0] for x in done)
    assert r["outcome"] == h["outcome"] == "RolledBack"
    assert r["reason"]
    assert h["reason"]
    r, h = both(pair, "GET", "/v1/slots/a")
    assert r.json()["source"] == h.json()["source"] == f"file://{model_b}"
    assert r.json()["lastError"]
    assert h.json()["lastError"]
    both(pair, "GET", "/v1/slots/a/swaps")
    r, h = both(pair, "DELETE", "/v1/slots/a")
    assert r.status_code == 202
    for t in pair:
        t.until("slot a gone", "/v1/slots/a", lambda x: x.status_code == 404)
    both(pair, "DELETE", "/v1/slots/a")  # 404 now
    both(pair, "GET", "/v1/slots/a/swaps")  # 404 now


def _finished(count: int) -> Callable[[httpx.Response], bool]:
    def check(r: httpx.Response) -> bool:
        items = r.json().get("items", []) if r.status_code == 200 else []
        return len(items) >= count and items[0]["outcome"] is not None

    return check
