"""The console and admin API behind Kubernetes authentication, on the real API server: two
gateway replicas with `--console` as the gateway's own ServiceAccount (with the console RBAC as
shipped), ServiceAccount tokens from `kubectl create token`, admin-scoped and ordinary API keys.

Without a credential every page and endpoint is 401, with `--allow-anonymous` too; an API key
without the admin scope is 403; a Kubernetes identity sees what its RBAC lets it list; the login
form sets an HttpOnly, SameSite=Strict cookie whose changes need the CSRF token; keys created
through the admin API work at once and revoked ones are refused by the other replica within a
second. No agents: the OpenAI side answers `/v1/models` (an empty list) for a valid key.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mlxfleet_operator.dev import controlplane
from tests.support import console as cs
from tests.support import gateway as gws

pytestmark = pytest.mark.cluster
SYSTEM = "mlxfleet-system"
PAGES = ["/console/fleet", "/console/deployments", "/console/swaps", "/console/usage",
         "/console/keys", "/console/playground", "/console/nodes/x"]  # fmt: skip
ENDPOINTS = [
    ("GET", "/admin/v1/keys"),
    ("POST", "/admin/v1/keys"),
    ("GET", "/admin/v1/keys/x"),
    ("PATCH", "/admin/v1/keys/x"),
    ("DELETE", "/admin/v1/keys/x"),
    ("POST", "/admin/v1/keys/x/rotate"),
    ("GET", "/admin/v1/usage"),
    ("GET", "/admin/v1/budgets"),
    ("PUT", "/admin/v1/budgets"),
    ("GET", "/admin/v1/fleet"),
    ("GET", "/admin/v1/deployments"),
    ("GET", "/admin/v1/swapplans"),
    ("POST", "/admin/v1/swapplans/ns/p/approve"),
    ("GET", "/admin/v1/nodes/x/events"),
    ("GET", "/admin/v1/nodes/x/logs"),
]
READER_RULES = [
    {"apiGroups": ["mlxfleet.io"], "resources": ["inferencenodes", "modeldeployments",
     "modelroutes", "swapplans"], "verbs": ["get", "list", "watch"]},
]  # fmt: skip
KEY_ADMIN = {SYSTEM: [{"apiGroups": [""], "resources": ["secrets"],
             "verbs": ["get", "list", "create", "patch", "delete"]}]}  # fmt: skip


@dataclass
class Setup:
    gw: gws.Gateway  # replica A
    gw2: gws.Gateway  # replica B
    anon: gws.Gateway  # --allow-anonymous --console
    admin_key: str
    plain_key: str
    reader: cs.Identity
    keeper: cs.Identity  # may manage keys (Secrets in mlxfleet-system)
    nobody: cs.Identity


@pytest.fixture(scope="module")
def setup(
    cluster: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console-auth")
    label = uuid.uuid4().hex[:6]
    admin_key, admin_secret = gws.api_key_secret(
        f"ca-admin-{label}", namespaces="*", scopes="admin"
    )
    plain_key, plain_secret = gws.api_key_secret(f"ca-plain-{label}", namespaces="*")
    for secret in (admin_secret, plain_secret):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
    with cs.console_rbac(cluster):
        reader = cs.identity(cluster, "reader", rules=READER_RULES)
        keeper = cs.identity(cluster, "keeper", rules=READER_RULES, namespaced=KEY_ADMIN)
        nobody = cs.identity(cluster, "nobody")
        kubeconfig: Path = cluster.gateway_kubeconfig
        started: list[gws.Gateway] = []
        try:
            for name, anonymous in (("a", False), ("b", False), ("anon", True)):
                started.append(
                    gws.start_gateway(
                        kubeconfig, root / name, anonymous=anonymous, extra=["--console"]
                    )
                )
            gw, gw2, anon = started
            for g in started:
                g.wait_for(
                    "the admin key",
                    lambda g=g: (
                        httpx.get(
                            g.url + "/admin/v1/keys", headers=_bearer(admin_key), timeout=5
                        ).status_code
                        == 200
                    ),
                )
            yield Setup(gw, gw2, anon, admin_key, plain_key, reader, keeper, nobody)
        finally:
            for g in started:
                g.stop()
            for who in (reader, keeper, nobody):
                cs.remove(cluster, who)
            for secret in (admin_secret, plain_secret):
                name = secret["metadata"]["name"]
                cluster.kubectl("delete", "secret", name, "-n", SYSTEM, check=False)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("anonymous", [False, True], ids=["secure", "allow-anonymous"])
def test_every_page_and_endpoint_is_401_without_credentials(setup: Setup, anonymous: bool) -> None:
    gw = setup.anon if anonymous else setup.gw
    for path in PAGES:
        r = httpx.get(gw.url + path, timeout=10)
        assert r.status_code == 401, (path, r.status_code)
        assert "Log in" in r.text
        assert "mlxfleet" in r.text
    for method, path in ENDPOINTS:
        r = httpx.request(method, gw.url + path, json={}, timeout=10)
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("Bearer mfk-" + "x" * 43, id="unknown-api-key"),
        pytest.param("Bearer not-a-token", id="garbage-token"),
        pytest.param("Bearer", id="empty"),
        pytest.param("Basic dXNlcjpwYXNz", id="basic"),
    ],
)
def test_bad_credentials_are_401(setup: Setup, header: str) -> None:
    for gw in (setup.gw, setup.anon):
        h = {"Authorization": header}
        r = httpx.get(gw.url + "/admin/v1/keys", headers=h, timeout=10)
        assert r.status_code == 401, r.text
        r = httpx.get(gw.url + "/console/fleet", headers=h, timeout=10)
        assert r.status_code == 401


def test_an_api_key_without_the_admin_scope_is_403(setup: Setup) -> None:
    r = httpx.get(setup.gw.url + "/admin/v1/keys", headers=_bearer(setup.plain_key), timeout=10)
    assert r.status_code == 403, r.text
    assert "admin scope" in r.json()["error"]["message"]
    r = httpx.get(setup.gw.url + "/console/fleet", headers=_bearer(setup.plain_key), timeout=10)
    assert r.status_code == 403
    # the same key still serves the OpenAI side
    assert (
        httpx.get(setup.gw.url + "/v1/models", headers=_bearer(setup.plain_key)).status_code == 200
    )


def test_kubernetes_identities_see_what_their_rbac_lets_them(setup: Setup) -> None:
    gw = setup.gw
    for path in ("/admin/v1/fleet", "/console/fleet", "/console/swaps", "/console/deployments"):
        r = httpx.get(gw.url + path, headers=setup.reader.headers, timeout=10)
        assert r.status_code == 200, (path, r.text)
    assert (
        setup.reader.user in httpx.get(gw.url + "/console/fleet", headers=setup.reader.headers).text
    )
    r = httpx.get(gw.url + "/admin/v1/fleet", headers=setup.nobody.headers, timeout=10)
    assert r.status_code == 403
    assert "may not list inferencenodes.mlxfleet.io" in r.json()["error"]["message"]
    # keys are Secrets: the reader may not list them, the keeper may
    assert httpx.get(gw.url + "/admin/v1/keys", headers=setup.reader.headers).status_code == 403
    assert httpx.get(gw.url + "/console/usage", headers=setup.reader.headers).status_code == 403
    r = httpx.get(gw.url + "/admin/v1/keys", headers=setup.keeper.headers, timeout=10)
    assert r.status_code == 200
    assert all("keyHash" not in k for k in r.json()["items"])


def test_a_key_created_through_the_api_works_at_once_and_a_revoked_one_is_refused_within_a_second(
    setup: Setup,
) -> None:
    name = f"made-{uuid.uuid4().hex[:6]}"
    body = {"name": name, "namespaces": ["*"], "team": "search", "requestsPerMinute": 100}
    r = httpx.post(setup.gw.url + "/admin/v1/keys", json=body, headers=setup.keeper.headers)
    assert r.status_code == 201, r.text
    made = r.json()
    key = made["key"]
    assert key.startswith("mfk-")
    assert made["team"] == "search"
    assert made["requestsPerMinute"] == 100
    assert made["createdBy"] == setup.keeper.user
    # at once, on the replica that made it
    assert httpx.get(setup.gw.url + "/v1/models", headers=_bearer(key)).status_code == 200
    setup.gw2.wait_for(
        "replica B knows the key",
        lambda: httpx.get(setup.gw2.url + "/v1/models", headers=_bearer(key)).status_code == 200,
        timeout=5,
    )
    # rotate: a new key, the old one refused
    r = httpx.post(setup.gw.url + f"/admin/v1/keys/{name}/rotate", headers=setup.keeper.headers)
    assert r.status_code == 200, r.text
    rotated = r.json()["key"]
    assert httpx.get(setup.gw.url + "/v1/models", headers=_bearer(key)).status_code == 401
    assert httpx.get(setup.gw.url + "/v1/models", headers=_bearer(rotated)).status_code == 200
    setup.gw2.wait_for(
        "replica B knows the rotated key",
        lambda: (
            httpx.get(setup.gw2.url + "/v1/models", headers=_bearer(rotated)).status_code == 200
        ),
        timeout=5,
    )
    # revoke through replica A: A refuses at once, B within a second
    r = httpx.delete(setup.gw.url + f"/admin/v1/keys/{name}", headers=setup.keeper.headers)
    assert r.status_code == 200, r.text
    revoked_at = time.monotonic()
    assert httpx.get(setup.gw.url + "/v1/models", headers=_bearer(rotated)).status_code == 401
    while httpx.get(setup.gw2.url + "/v1/models", headers=_bearer(rotated)).status_code != 401:
        assert time.monotonic() - revoked_at < 1.0, "replica B still served a revoked key"
        time.sleep(0.02)
    assert time.monotonic() - revoked_at < 1.0


def test_keys_are_changed_with_the_callers_own_rights_and_checked(setup: Setup) -> None:
    name = f"ro-{uuid.uuid4().hex[:6]}"
    r = httpx.post(
        setup.gw.url + "/admin/v1/keys", json={"name": name, "namespaces": "*"},
        headers=setup.reader.headers,
    )  # fmt: skip
    assert r.status_code == 403, r.text  # the API server refused the reader itself
    assert setup.reader.user in r.json()["error"]["message"]
    bad = [
        ({"name": "Bad_Name", "namespaces": "*"}, "name"),
        ({"name": name, "namespaces": "*", "requestsPerMinute": 0}, "requestsPerMinute"),
        ({"name": name, "namespaces": "*", "expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
        ({"name": name, "namespaces": "*", "monthlyBudget": -1}, "monthlyBudget"),
        ({"name": name, "namespaces": "*", "scopes": ["root"]}, "scopes"),
        ({"name": name, "namespaces": "*", "colour": "red"}, "colour"),
    ]
    for body, field in bad:
        r = httpx.post(setup.gw.url + "/admin/v1/keys", json=body, headers=setup.keeper.headers)
        assert r.status_code == 400, (body, r.text)
        assert field in r.json()["error"]["message"], (field, r.text)
    # only API keys: the fleet key's Secret is not one
    r = httpx.delete(
        setup.gw.url + "/admin/v1/keys/mlxfleet-fleet-key", headers=_bearer(setup.admin_key)
    )
    assert r.status_code == 404


def test_an_admin_key_manages_keys_and_budgets_but_approves_nothing(setup: Setup) -> None:
    h = _bearer(setup.admin_key)
    name = f"byadmin-{uuid.uuid4().hex[:6]}"
    r = httpx.post(
        setup.gw.url + "/admin/v1/keys", json={"name": name, "namespaces": "*"}, headers=h
    )
    assert r.status_code == 201, r.text
    r = httpx.patch(setup.gw.url + f"/admin/v1/keys/{name}", json={"monthlyBudget": 5}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["monthlyBudget"] == 5
    r = httpx.put(
        setup.gw.url + "/admin/v1/budgets",
        json={"teams": {"search": 10}, "prices": {"default": 1.5}},
        headers=h,
    )
    assert r.status_code == 200, r.text
    assert r.json()["teams"]["search"]["monthlyBudget"] == 10
    r = httpx.put(setup.gw.url + "/admin/v1/budgets", json={"prices": {"x/y": -1}}, headers=h)
    assert r.status_code == 400
    assert "prices" in r.text
    r = httpx.post(setup.gw.url + "/admin/v1/swapplans/ns/p/approve", headers=h)
    assert r.status_code == 403
    assert "Kubernetes identity" in r.text
    assert httpx.delete(setup.gw.url + f"/admin/v1/keys/{name}", headers=h).status_code == 200


def test_login_sets_a_strict_cookie_and_changes_need_the_csrf_token(setup: Setup) -> None:
    gw = setup.gw
    with httpx.Client(base_url=gw.url, timeout=10) as browser:
        r = browser.post("/console/login", data={"credential": setup.keeper.token})
        assert r.status_code == 303
        assert r.headers["location"] == "/console/fleet"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "Path=/" in cookie
        assert setup.keeper.token not in cookie  # sealed, not readable
        page = browser.get("/console/keys")
        assert page.status_code == 200
        csrf = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        body = {"name": f"csrf-{uuid.uuid4().hex[:6]}", "namespaces": "*"}
        r = browser.post("/admin/v1/keys", json=body)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "csrf_failed"
        r = browser.post(
            "/admin/v1/keys",
            json=body,
            headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"},
        )
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "csrf_failed"
        r = browser.post("/admin/v1/keys", json=body, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 201, r.text
        browser.delete(f"/admin/v1/keys/{body['name']}", headers={"X-CSRF-Token": csrf})
        # the other replica opens the same cookie
        r = httpx.get(setup.gw2.url + "/console/fleet", cookies=browser.cookies)
        assert r.status_code == 200
        r = browser.post("/console/logout", data={"csrf": csrf})
        assert r.status_code == 303
        assert browser.get("/console/fleet").status_code == 401
    # a tampered cookie is no session
    r = httpx.get(gw.url + "/console/fleet", cookies={"mlxfleet_console": "A" * 120})
    assert r.status_code == 401
    r = httpx.post(gw.url + "/console/login", data={"credential": "nonsense"})
    assert r.status_code == 401
    assert "does not accept" in r.text


def test_the_console_rbac_is_least_privilege(
    cluster: controlplane.ControlPlane, setup: Setup
) -> None:
    def can(*args: str) -> str:
        return cluster.kubectl("auth", "can-i", *args, as_gateway=True, check=False).stdout.strip()

    assert can("create", "tokenreviews.authentication.k8s.io") == "yes"
    assert can("create", "subjectaccessreviews.authorization.k8s.io") == "yes"
    assert can("list", "swapplans.mlxfleet.io", "--all-namespaces") == "yes"
    assert can("create", "secrets", "-n", SYSTEM) == "yes"
    assert can("patch", "swapplans.mlxfleet.io", "-n", "default") == "no"  # the caller's own
    assert can("list", "events", "--all-namespaces") == "no"  # the caller's own
    assert can("get", "secrets", "-n", "mlxfleet-agents") == "no"  # agent tokens: the caller's
    assert can("create", "secrets", "-n", "default") == "no"
    assert can("create", "selfsubjectreviews.authentication.k8s.io") == "yes"  # everyone may
    kinds = sorted(d["kind"] for d in cs.rbac_documents())
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
