"""One gateway URL in front of a real fleet: control plane, operator, two agents with mlx-lm, the
gateway as its own ServiceAccount (API keys required), S3 telemetry, and the openai client.

Team A (the workspace namespace) has `chat-a` (model A, on n1), `chat-b` (model B, on n1 and n2)
and the route `chat` (header or tools -> chat-b; else chat-a 90 / chat-b 10). Team B has its own
`chat-a` (on n2) and a route `b-private`. Keys are scoped to one team's namespace.
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from mlxfleet_agent import contract
from mlxfleet_gateway.core import traits
from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.e2e.conftest import wait_for
from tests.support import gateway as gws
from tests.support import s3 as s3support

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.s3]
PREFIX = "gw-telemetry"
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@dataclass
class Setup:
    fleet: gwfleet.Fleet
    gateway: gws.Gateway
    ns_a: str
    ns_b: str
    keys: dict[str, str]
    bucket: str
    s3: s3support.S3Server

    def client(self, key: str) -> openai.OpenAI:
        return self.gateway.openai(api_key=self.keys[key])


@pytest.fixture(scope="module")
def setup(
    cluster: controlplane.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    model_a: Path,
    model_b: Path,
    s3_server: s3support.S3Server,
) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("gateway-e2e")
    with gwfleet.fleet(cluster, root, model_a.parent, namespaces=("b",)) as fl:
        ns_a, ns_b = fl.ws.namespace, f"{fl.ws.namespace}-b"
        n1, n2 = fl.node("n1"), fl.node("n2")
        fl.deploy("chat-a", model_a, replicas=1, placement={"nodes": [n1]})
        fl.deploy("chat-b", model_b, replicas=2)
        fl.deploy("chat-a", model_b, namespace=ns_b, replicas=1, placement={"nodes": [n2]})
        fl.route(
            "chat",
            {
                "rules": [
                    {
                        "name": "code",
                        "match": {"headers": [{"name": "x-mlxfleet-task", "values": ["code"]}]},
                        "backends": [{"deployment": "chat-b"}],
                    },
                    {
                        "name": "tools",
                        "match": {"hasTools": True},
                        "backends": [{"deployment": "chat-b"}],
                    },
                    {
                        "name": "default",
                        "backends": [
                            {"deployment": "chat-a", "weight": 90},
                            {"deployment": "chat-b", "weight": 10},
                        ],
                    },
                ]
            },
        )
        fl.route(
            "b-private",
            {"rules": [{"name": "d", "backends": [{"deployment": "chat-a"}]}]},
            namespace=ns_b,
        )
        for name, ns, replicas in (("chat-a", ns_a, 1), ("chat-b", ns_a, 2), ("chat-a", ns_b, 1)):
            fl.wait_ready(name, namespace=ns, replicas=replicas)
        label = fl.ws.label
        keys = {
            "a": fl.key(f"{label}-a", team="search", owner="alice@example.com"),
            "b": fl.key(f"{label}-b", namespaces=ns_b, team="ads"),
            "usage": fl.key(f"{label}-usage", team="search"),
            "narrow": fl.key(f"{label}-narrow", models="chat-b"),
            "rpm": fl.key(f"{label}-rpm", requestsPerMinute=20),
            "tpm": fl.key(f"{label}-tpm", tokensPerMinute=600),
            "cap": fl.key(f"{label}-cap", tokensPerMinute=100),
            "uncapped": fl.key(f"{label}-uncapped", tokensPerMinute=1000),
            "abandon": fl.key(f"{label}-abandon"),
            "expired": fl.key(f"{label}-expired", expiresAt="2020-01-01T00:00:00Z"),
        }
        bucket = s3_server.make_bucket()
        fl.gateway = gws.start_gateway(
            cluster.gateway_kubeconfig,
            root / "gateway",
            extra=[
                "--telemetry-bucket",
                bucket,
                "--telemetry-prefix",
                PREFIX,
                "--telemetry-endpoint-url",
                s3_server.endpoint_url,
                "--telemetry-region",
                s3_server.region,
                "--telemetry-interval-s",
                "2",
                "--name",
                "e2e",
            ],
            env={
                "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": s3_server.access_key,
                "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": s3_server.secret_key,
            },
        )
        gw = fl.gateway

        def every_key_known() -> bool:
            try:
                return all(
                    gw.openai(api_key=k).models.list() is not None
                    for n, k in keys.items()
                    if n != "expired"
                )
            except openai.AuthenticationError:
                return False

        gw.wait_for("the gateway knows every key", every_key_known)
        yield Setup(fl, gw, ns_a, ns_b, keys, bucket, s3_server)


def backend(raw: Any) -> str:
    return str(raw.headers.get("x-mlxfleet-backend") or "")


def ask(client: openai.OpenAI, model: str, **kw: Any) -> Any:
    kw.setdefault("messages", HELLO)
    kw.setdefault("max_tokens", 4)
    return client.chat.completions.with_raw_response.create(model=model, **kw)


def test_models_list_only_what_the_key_may_use(setup: Setup) -> None:
    a = {m.id for m in setup.client("a").models.list().data}
    b = {m.id for m in setup.client("b").models.list().data}
    assert a == {"chat", "chat-a", "chat-b"}
    assert b == {"chat-a", "b-private"}
    assert {m.id for m in setup.client("narrow").models.list().data} == {"chat-b"}


@pytest.mark.parametrize("model", ["b-private", "no-such-model"])
def test_unknown_or_foreign_models_are_404_revealing_nothing(setup: Setup, model: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        ask(setup.client("a"), model)
    body = info.value.response.json()
    assert body["error"]["message"] == (
        f"The model `{model}` does not exist or you do not have access to it."
    )
    assert body["error"]["code"] == "model_not_found"
    assert setup.ns_b not in info.value.response.text


def test_the_same_name_in_two_namespaces_is_each_teams_own(setup: Setup) -> None:
    a = backend(ask(setup.client("a"), "chat-a"))
    b = backend(ask(setup.client("b"), "chat-a"))
    assert a.startswith(f"{setup.ns_a}/chat-a@"), a
    assert a.endswith("-n1"), a
    assert b.startswith(f"{setup.ns_b}/chat-a@"), b
    assert b.endswith("-n2"), b


def test_two_deployments_and_a_route_through_one_url(setup: Setup) -> None:
    client = setup.client("a")
    assert backend(ask(client, "chat-a")).startswith(f"{setup.ns_a}/chat-a@")
    served_b = {backend(ask(client, "chat-b")).rsplit("@", 1)[1] for _ in range(12)}
    assert served_b == {setup.fleet.node("n1"), setup.fleet.node("n2")}  # both replicas serve
    streamed = client.chat.completions.create(
        model="chat", messages=HELLO, max_tokens=6, stream=True
    )
    chunks = list(streamed)
    assert chunks[-1].choices[0].finish_reason is not None
    assert all(c.usage is None for c in chunks)  # not asked for: held back by the gateway


def _split(setup: Setup, n: int) -> Counter[str]:
    client = setup.client("a")

    def one(_: int) -> str:
        return backend(ask(client, "chat", max_tokens=1)).split("@")[0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return Counter(pool.map(one, range(n)))


def test_canary_split_90_10_within_5_points_over_500_requests(setup: Setup) -> None:
    counts = _split(setup, 500)
    share = counts[f"{setup.ns_a}/chat-b"] / 500
    print(f"\ncanary: {dict(counts)} -> {share:.1%} to chat-b")
    assert sum(counts.values()) == 500
    assert 0.05 <= share <= 0.15, counts


def test_task_rules_send_tools_and_code_to_the_other_deployment(setup: Setup) -> None:
    client = setup.client("a")
    code = [
        backend(ask(client, "chat", extra_headers={"x-mlxfleet-task": "code"})) for _ in range(15)
    ]
    tools = [backend(ask(client, "chat", tools=TOOLS)) for _ in range(15)]
    assert all(b.startswith(f"{setup.ns_a}/chat-b@") for b in code + tools), code + tools


def test_route_status_shows_backends_and_the_split(setup: Setup) -> None:
    def status() -> dict[str, Any]:
        return setup.fleet.ws.get("mroute", "chat").get("status") or {}

    wait_for("route status", lambda: status().get("backendsReady") == "4/4", timeout=60)
    split = {(e["rule"], e["backend"]): e["percent"] for e in status()["split"]}
    assert split[("default", "chat-a")] == 90.0
    assert split[("default", "chat-b")] == 10.0
    ready = {c["type"]: c for c in status()["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    row = setup.fleet.ws.kubectl("get", "mroute", "chat", "-n", setup.ns_a, "--no-headers")
    assert "4/4" in row
    assert "Ready" in row


def test_missing_unknown_and_expired_keys_are_401(setup: Setup) -> None:
    url = setup.gateway.base_url + "/chat/completions"
    body = {"model": "chat-a", "messages": HELLO, "max_tokens": 2}
    assert httpx.post(url, json=body, timeout=30).status_code == 401
    for key in ("mfk-not-a-key", setup.keys["expired"]):
        r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(setup.gateway.base_url + "/models", timeout=30).status_code == 401
    refused = [line for line in access_lines(setup.gateway) if line.get("status") == 401]
    assert len(refused) >= 4
    assert {line["error"] for line in refused} >= {"invalid_api_key"}


def test_a_model_the_key_may_not_use_is_403(setup: Setup) -> None:
    with pytest.raises(openai.PermissionDeniedError) as info:
        ask(setup.client("narrow"), "chat-a")
    assert info.value.response.json()["error"]["code"] == "model_not_allowed"
    assert backend(ask(setup.client("narrow"), "chat-b")).startswith(f"{setup.ns_a}/chat-b@")


def test_requests_per_minute_hold_exactly_and_say_when_to_retry(setup: Setup) -> None:
    client = setup.client("rpm")
    ok, limited, waits, codes = 0, 0, [], set()
    for _ in range(26):
        try:
            ask(client, "chat-a", max_tokens=1)
            ok += 1
        except openai.RateLimitError as exc:
            limited += 1
            waits.append(int(exc.response.headers["retry-after"]))
            codes.add(exc.response.json()["error"]["code"])
    assert (ok, limited) == (20, 6)
    assert codes == {"requests_per_minute"}
    assert all(1 <= w <= 60 for w in waits), waits


def test_tokens_per_minute_hold_within_10_percent(setup: Setup) -> None:
    client = setup.client("tpm")
    used, code = 0, None
    for _ in range(200):
        try:
            raw = ask(client, "chat-a", max_tokens=16)
        except openai.RateLimitError as exc:
            code = exc.response.json()["error"]["code"]
            break
        usage = raw.parse().usage
        used += usage.prompt_tokens + usage.completion_tokens
    else:
        pytest.fail("never limited")
    print(f"\ntokens per minute: limit 600, served {used}")
    assert code == "tokens_per_minute"
    assert 600 <= used <= 660


def test_a_token_cap_below_1_is_refused_before_it_reserves_anything(setup: Setup) -> None:
    """The attack on tokensPerMinute: `max_tokens` -1e12 reserved a negative amount (20 requests
    of 60 tokens served on a key allowed 100), and overlapping ones left +1e12 reserved for good
    (every later request 429). The gateway refuses it itself (no backend answered), naming the
    field, and the key's limit holds as if it had never been sent."""

    def bad(client: openai.OpenAI, field: str) -> tuple[int, str, str]:
        try:
            ask(client, "chat-a", extra_body={field: -(10**12)})
        except openai.BadRequestError as exc:
            error = exc.response.json()["error"]
            return exc.status_code, error["param"], backend(exc.response)
        pytest.fail(f"{field} -1e12 was served")

    fields = ["max_tokens", "max_completion_tokens"] * 3
    served, codes = 0, set()
    with setup.client("cap") as client, concurrent.futures.ThreadPoolExecutor(6) as pool:
        refused = sorted(pool.map(lambda field: bad(client, field), fields))
        for _ in range(20):
            try:
                ask(client, "chat-a", max_tokens=60)
                served += 1
            except openai.RateLimitError as exc:
                codes.add(exc.response.json()["error"]["code"])
    assert refused == [(400, "max_completion_tokens", "")] * 3 + [(400, "max_tokens", "")] * 3
    assert (served, codes) == (2, {"tokens_per_minute"})


def test_requests_without_a_cap_reserve_what_the_slot_lets_them_generate(setup: Setup) -> None:
    """Issue 22 item 5: a request without `max_tokens` reserved 256 tokens while its slot let
    it generate more (chat-a: mlx_lm's 512 within contextLength 1024), so six at once on a key
    allowed 1,000 tokens a minute were four admitted and used about twice the limit. Now each
    reserves what the slot allows: what the admitted ones use passes the limit by at most one
    request's use."""
    codes: set[str] = set()

    def one(client: openai.OpenAI) -> int | None:
        try:
            raw = ask(client, "chat-a", max_tokens=openai.NOT_GIVEN)
        except openai.RateLimitError as exc:
            codes.add(exc.response.json()["error"]["code"])
            return None
        usage = raw.parse().usage
        return int(usage.prompt_tokens + usage.completion_tokens)

    with setup.client("uncapped") as client, concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: one(client), range(6)))
    used = [r for r in results if r is not None]
    print(f"\nuncapped: {len(used)} of 6 admitted, used {used} (limit 1000)")
    assert used, "none admitted"
    assert len(used) < 6
    assert codes == {"tokens_per_minute"}
    assert sum(used) <= 1000 + max(used)


def test_a_stream_left_after_its_first_event_counts_its_prompt(setup: Setup) -> None:
    """Issue 22 item 5: prompt tokens came only from a stream's final usage event, so a client
    that read the first event and left was counted no prompt at all (nor limited by it). The
    prompt is now counted from the request when the usage event never comes."""
    text = "the quick brown fox jumps over the lazy dog " * 8
    body = {
        "model": "chat-a",
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "max_tokens": 600,
    }
    expected = traits.traits(body, {}).prompt_tokens_estimate
    auth = {"Authorization": f"Bearer {setup.keys['abandon']}"}
    with httpx.stream(
        "POST", setup.gateway.base_url + "/chat/completions", json=body, headers=auth, timeout=60
    ) as answer:
        assert answer.status_code == 200
        first = next(line for line in answer.iter_lines() if line.startswith("data:"))
    assert '"content"' in first or '"role"' in first  # left after the first event
    name = f"{setup.fleet.ws.label}-abandon"

    def counted() -> float:
        total = 0.0
        for line in setup.gateway.metrics().splitlines():
            if line.startswith("mlxfleet_gateway_requests_total{") and f'key="{name}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    wait_for("the abandoned stream finished", lambda: counted() >= 1, timeout=60)
    prompt = 0.0
    for line in setup.gateway.metrics().splitlines():
        if line.startswith("mlxfleet_gateway_prompt_tokens_total{") and f'key="{name}"' in line:
            prompt += float(line.rsplit(" ", 1)[1])
    assert prompt == expected > 0


def _bucket_objects(s3: s3support.S3Server, bucket: str) -> dict[str, str]:
    client = s3.client()
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = (
                client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            )
    return out


SENTENCE = "The quick brown fox jumps over the lazy dog. "  # 12 tokens of the dev tokenizer


def _metric_sum(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def test_a_prompt_over_the_context_is_refused_at_once_never_retried_nor_ejected(
    setup: Setup,
) -> None:
    """chat-b (2 replicas, contextLength 1024): a ~200k-token prompt, and one just over, get the
    agent's 400 `context_length_exceeded` through the gateway in under 50 ms, streamed or not;
    no other replica is tried, none is ejected, and the next request is served."""
    gw = setup.gateway
    before = gw.metrics()
    refused_before = len(refused_lines(gw, f"{setup.fleet.ws.label}-a"))
    client = setup.client("a")
    cases = [(SENTENCE * 17_000, 16), (SENTENCE * 80, 128)]  # 200k; 960 + 128 > 1024
    for text, max_tokens in cases:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(
                    model="chat-b",
                    messages=[{"role": "user", "content": text}],
                    max_tokens=max_tokens,
                    stream=stream,
                )
            assert caught.value.code == "context_length_exceeded"
            assert "maximum context length is 1024 tokens" in str(caught.value)
            headers = caught.value.response.headers
            assert "x-mlxfleet-tried" not in headers
            assert headers["x-mlxfleet-backend"].startswith(f"{setup.ns_a}/chat-b@")
    raw = json.dumps(
        {
            "model": "chat-b",
            "messages": [{"role": "user", "content": SENTENCE * 17_000}],
            "max_tokens": 16,
            "stream": True,
        }
    ).encode()
    took = []
    auth = {"authorization": f"Bearer {setup.keys['a']}", "content-type": "application/json"}
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        http.get("/v1/models", headers=auth)  # the connection is open before the clock starts
        for _ in range(7):
            started = time.perf_counter()
            reply = http.post("/v1/chat/completions", content=raw, headers=auth)
            took.append(time.perf_counter() - started)
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["code"] == "context_length_exceeded"
    assert statistics.median(took) < 0.050, took
    after = gw.metrics()
    for name in ("mlxfleet_gateway_retries_total", "mlxfleet_gateway_ejections_total"):
        assert _metric_sum(after, name) == _metric_sum(before, name), name
    served = ask(client, "chat-b")
    assert served.status_code == 200
    # the access log says what the client was told: 400, not the 200 of a started answer
    assert len(refused_lines(gw, f"{setup.fleet.ws.label}-a")) - refused_before == 4 + 7


def refused_lines(gateway: gws.Gateway, key: str) -> list[dict[str, Any]]:
    return [
        line
        for line in access_lines(gateway)
        if line.get("key") == key and line["status"] == 400 and line["error"] == "http_400"
    ]


def test_usage_per_key_matches_what_clients_received_and_no_text_leaves(setup: Setup) -> None:
    client = setup.client("usage")
    canaries, prompt, completion, requests = [], 0, 0, 0
    for i in range(6):
        canary = f"CANARY-{uuid.uuid4().hex}"
        canaries.append(canary)
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": f"repeat {canary} please {i}"}
        ]
        model = ("chat", "chat-a", "chat-b")[i % 3]
        if i % 2:
            reply = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
            assert reply.usage is not None
            prompt += reply.usage.prompt_tokens
            completion += reply.usage.completion_tokens
        else:
            usage = None
            for chunk in client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            ):
                usage = chunk.usage or usage
            assert usage is not None
            prompt += usage.prompt_tokens
            completion += usage.completion_tokens
        requests += 1
    name = f"{setup.fleet.ws.label}-usage"

    def metric(family: str) -> float:
        total = 0.0
        for line in setup.gateway.metrics().splitlines():
            if line.startswith(f"mlxfleet_gateway_{family}{{") and f'key="{name}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    assert metric("prompt_tokens_total") == prompt
    assert metric("completion_tokens_total") == completion
    assert metric("requests_total") == requests

    def shipped() -> list[contract.KeyTelemetry]:
        rows = []
        for key, body in _bucket_objects(setup.s3, setup.bucket).items():
            if key.endswith(".jsonl"):
                iv = contract.TelemetryInterval.model_validate_json(body)
                assert iv.component == "gateway"
                rows += [r for r in iv.keys if r.key == name]
        return rows

    wait_for("usage shipped", lambda: sum(r.requests for r in shipped()) >= requests, timeout=60)
    rows = shipped()
    assert sum(r.requests for r in rows) == requests
    assert sum(r.prompt_tokens for r in rows) == prompt
    assert sum(r.completion_tokens for r in rows) == completion
    assert {r.team for r in rows} == {"search"}
    assert {r.namespace for r in rows} == {setup.ns_a}
    objects = _bucket_objects(setup.s3, setup.bucket)
    # the intervals, and each replica's month so far (the console's usage and budgets read it)
    assert all(
        (k.startswith(f"{PREFIX}/v1/date=") and "/node=gateway-e2e-" in k)
        or (k.startswith(f"{PREFIX}/v1/month-to-date/month=") and k.endswith(".json"))
        for k in objects
    ), sorted(objects)
    everything = "\n".join(
        [*objects, *objects.values(), setup.gateway.metrics(), setup.gateway.log()]
    )
    for canary in canaries:
        assert canary not in everything
        assert canary[len("CANARY-") :] not in everything
    assert setup.keys["usage"] not in everything  # the key itself is never shipped or logged
    assert json.dumps(setup.keys["usage"]) not in everything
    # the access log (issue 28 item 9): a line per request, its figures, never its text
    mine = [line for line in access_lines(setup.gateway) if line.get("key") == name]
    assert len(mine) == requests
    assert sum(line["prompt_tokens"] for line in mine) == prompt
    assert sum(line["completion_tokens"] for line in mine) == completion
    assert {line["status"] for line in mine} == {200}
    not_ok = [line for line in mine if line["outcome"] != "ok"]
    assert not not_ok, json.dumps(not_ok)
    assert {line["stream"] for line in mine} == {True, False}
    assert all(line["duration_ms"] >= line["ttfb_ms"] > 0 for line in mine), mine
    assert {line["model"] for line in mine} == {"chat", "chat-a", "chat-b"}


def access_lines(gateway: gws.Gateway) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in gateway.log().splitlines()
        if '"logger": "mlxfleet_gateway.access"' in line
    ]


def test_a_name_taken_on_its_node_is_a_placement_filter_and_slots_are_addressed(
    setup: Setup, model_b: Path
) -> None:
    """Issue 9, tenants: `chat-a` of team b pinned to the node where team a's `chat-a` runs is
    Stalled with ServedNameConflict (not SourceInvalid naming team a's slot); the agent routes
    by the slot the gateway names (x-mlxfleet-slot) only for the fleet credential."""
    fl, n1 = setup.fleet, setup.fleet.node("n1")
    body = fl.ws.deployment("chat-n1", model_b, replicas=1, placement={"nodes": [n1]})
    body["spec"]["model"]["servedName"] = "chat-a"
    body["metadata"]["namespace"] = setup.ns_b
    fl.apply(body)

    def stalled() -> dict[str, Any] | None:
        md = json.loads(
            fl.cluster.kubectl("get", "mdep", "chat-n1", "-n", setup.ns_b, "-o", "json").stdout
        )
        ready = [c for c in md.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        return ready[0] if ready and ready[0]["reason"] == "ServedNameConflict" else None

    condition = wait_for("chat-n1 ServedNameConflict", stalled, timeout=60)
    assert "'chat-a'" in condition["message"]
    assert setup.ns_a not in condition["message"]
    fl.cluster.kubectl("delete", "mdep", "chat-n1", "-n", setup.ns_b, "--timeout=60s")

    mine = json.loads(
        fl.cluster.kubectl("get", "mdep", "chat-a", "-n", setup.ns_a, "-o", "json").stdout
    )
    (placed,) = mine["status"]["placements"]
    assert placed["slot"]
    url = fl.nodes[n1].data_url + "/v1/chat/completions"
    ask_ = {"model": "any-name", "messages": HELLO, "max_tokens": 2}
    fleet = {"Authorization": f"Bearer {gws.node_key(n1)}"}
    by_slot = httpx.post(url, json=ask_, headers={**fleet, "x-mlxfleet-slot": placed["slot"]})
    assert by_slot.status_code == 200, by_slot.text
    assert by_slot.json()["model"] == "chat-a"
    missing = httpx.post(url, json=ask_, headers={**fleet, "x-mlxfleet-slot": "no-such-slot"})
    assert missing.status_code == 503  # the gateway's view is behind: it tries elsewhere
    assert missing.json()["error"]["code"] == "slot_not_found"
    assert (
        httpx.post(url, json=ask_, headers={"x-mlxfleet-slot": placed["slot"]}).status_code == 401
    )
