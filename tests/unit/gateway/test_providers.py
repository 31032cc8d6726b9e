"""Provider keys go only where their Secret's owner allows: URL prefixes matched whole."""

from __future__ import annotations

import pytest

from mlxfleet_operator.api import providerkeys as providers

OPENAI = "https://api.openai.com/v1"
ANNOTATIONS = {
    "mlxfleet.io/allowed-namespaces": "team-a",
    "mlxfleet.io/allowed-urls": f"{OPENAI}, http://127.0.0.1:8080/v1",
}


def key(annotations: dict[str, str] = ANNOTATIONS) -> providers.ProviderKey:
    found, _ = providers.from_secret("openai", annotations, {"apiKey": "sk-1"})
    return found


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(OPENAI, id="the prefix itself"),
        pytest.param(OPENAI + "/", id="a trailing slash"),
        pytest.param(OPENAI + "/beta", id="below the prefix"),
        pytest.param("https://api.openai.com:443/v1", id="the default port spelt out"),
        pytest.param("HTTPS://API.OpenAI.com/v1", id="scheme and host in another case"),
        pytest.param("http://127.0.0.1:8080/v1", id="plain http where the owner listed http"),
    ],
)
def test_urls_the_owner_allowed_get_the_key(url: str) -> None:
    assert key().may_send_to(url)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("https://api.openai.com.evil.com/v1", id="host with a suffix"),
        pytest.param("https://evil.com/api.openai.com/v1", id="host in the path"),
        pytest.param("https://api.openai.com/v1evil", id="path segment with a suffix"),
        pytest.param("https://api.openai.com/v", id="path shorter than the prefix"),
        pytest.param("https://api.openai.com/", id="above the prefix"),
        pytest.param("https://api.openai.com@evil.com/v1", id="userinfo: the host is evil.com"),
        pytest.param("https://user@api.openai.com/v1", id="any userinfo"),
        pytest.param("https://evil.com\\@api.openai.com/v1", id="backslash before userinfo"),
        pytest.param("http://api.openai.com/v1", id="plain http to an https prefix"),
        pytest.param("https://api.openai.com:8443/v1", id="another port"),
        pytest.param("https://api.openai.com/v1/../admin", id="dot segment"),
        pytest.param("https://api.openai.com/v1/%2e%2e/admin", id="encoded dot segment"),
        pytest.param("https://api.openai.com/v1%2f..%2fadmin", id="encoded slash"),
        pytest.param("https://api.openai.com/v1?x=1", id="query"),
        pytest.param("https://api.openai.com/v1#x", id="fragment"),
        pytest.param("https://api.openai.com/v1\n", id="control character"),
        pytest.param("https://api.openai.com:99999/v1", id="port out of range"),
        pytest.param("https://api.openai.\u0441om/v1", id="non-ASCII look-alike"),
        pytest.param("http://127.0.0.1:47999/v1", id="loopback on another port"),
        pytest.param("http://localhost:8080/v1", id="another name for an allowed host"),
        pytest.param("ftp://api.openai.com/v1", id="not http"),
        pytest.param("https://*.openai.com/v1", id="a literal star host"),
    ],
)
def test_everything_else_does_not(url: str) -> None:
    assert not key().may_send_to(url)


def test_without_allowed_urls_the_key_goes_nowhere_and_the_secret_is_reported() -> None:
    found, problems = providers.from_secret(
        "openai", {"mlxfleet.io/allowed-namespaces": "*"}, {"apiKey": "sk-1"}
    )
    assert found.allows("team-a")
    assert not found.may_send_to(OPENAI)
    assert "mlxfleet.io/allowed-urls" in problems[0]
    assert "has no mlxfleet.io/allowed-urls annotation" in found.refuses(OPENAI)


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param("*", id="wildcard"),
        pytest.param("https://*.openai.com/v1", id="wildcard host"),
        pytest.param("https://user@api.openai.com/v1", id="userinfo"),
        pytest.param("api.openai.com/v1", id="no scheme"),
        pytest.param("https://api.openai.com/v1?x", id="query"),
    ],
)
def test_entries_that_cannot_be_matched_safely_are_left_out_and_named(entry: str) -> None:
    found, problems = providers.from_secret(
        "openai", {"mlxfleet.io/allowed-urls": f"{entry},{OPENAI}"}, {}
    )
    assert found.may_send_to(OPENAI)
    assert not found.may_send_to("https://evil.com/v1")
    assert len(problems) == 1
    assert repr(entry) in problems[0]
    assert "mlxfleet.io/allowed-urls" in problems[0]


def test_a_refusal_names_the_secret_and_the_url() -> None:
    why = key().refuses("http://127.0.0.1:47999/v1")
    assert "provider-key Secret openai" in why
    assert "http://127.0.0.1:47999/v1" in why
