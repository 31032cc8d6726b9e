"""The agent's `/metrics` beyond loopback needs a token (issue 22 item 8), on a real agent.

`/metrics` on the control port names every tenant's slots and served names. It answered anyone
who could reach the port; an agent that listens beyond loopback now answers only the control
token or the scrape token (`--metrics-token-file`, what Prometheus sends from its
`credentials_file`), and the scrape token opens nothing else. On loopback without a scrape token
it stays open (a developer's agent).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = pytest.mark.mlx


def _get(agent: Agent, path: str, token: str | None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(agent.control_url + path, headers=headers, timeout=10)


def test_metrics_beyond_loopback_need_the_scrape_or_control_token(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    scrape = secrets.token_urlsafe(24)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(scrape + "\n")  # as a Secret mounted for Prometheus would hold it
    keys = tmp_path / "data-keys"
    data_key = secrets.token_urlsafe(24)
    keys.write_text(data_key + "\n")
    agent = agent_factory(
        extra=[
            "--bind",
            "0.0.0.0",  # every interface: beyond loopback (reached here over 127.0.0.1)
            "--metrics-token-file",
            str(token_file),
            "--data-api-keys-file",
            str(keys),
        ]
    )
    assert agent.put_slot("tenant-a-chat", slot_spec(model_a, "secret-project")).status_code in (
        200,
        201,
        202,
    )
    agent.wait_ready("tenant-a-chat")
    answered = httpx.post(
        agent.data_url + "/v1/completions",
        json={"model": "secret-project", "prompt": "hi", "max_tokens": 2},
        headers={"Authorization": f"Bearer {data_key}"},
        timeout=60,
    )
    assert answered.status_code == 200, answered.text  # now the metrics name the tenant's model
    for token in (None, "wrong-token-wrong-token", agent.token[:-1]):
        refused = _get(agent, "/metrics", token)
        assert refused.status_code == 401, refused.text
        assert "secret-project" not in refused.text
        assert refused.headers["www-authenticate"] == "Bearer"
    assert _get(agent, "/metrics/", None).status_code == 401
    for token in (scrape, agent.token):
        scraped = _get(agent, "/metrics", token)
        assert scraped.status_code == 200, scraped.text
        assert "secret-project" in scraped.text
    # the scrape token reads metrics and nothing else
    assert _get(agent, "/v1/state", scrape).status_code == 401
    assert _get(agent, "/v1/slots/tenant-a-chat", scrape).status_code == 401
    assert _get(agent, "/healthz", None).status_code == 200  # liveness stays open


def test_metrics_beyond_loopback_without_a_scrape_token_need_the_control_token(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    keys = tmp_path / "data-keys"
    keys.write_text(secrets.token_urlsafe(24) + "\n")
    agent = agent_factory(extra=["--bind", "0.0.0.0", "--data-api-keys-file", str(keys)])
    assert _get(agent, "/metrics", None).status_code == 401
    assert _get(agent, "/metrics", agent.token).status_code == 200


def test_metrics_on_loopback_stay_open(agent_factory: Callable[..., Agent]) -> None:
    agent = agent_factory()
    assert _get(agent, "/metrics", None).status_code == 200
