"""One S3 client builder for the three programs (issue 27: there were three boto3 builders, one
each in the agent, the gateway's shipper and the operator's reports store). Each use keeps the
settings it had: timeouts, attempts, retry mode, connection pool, region when none is given.
Building a boto3 client opens no socket."""

from __future__ import annotations

from typing import Any

import pytest

from mlxfleet_common import s3client
from mlxfleet_operator.adapters import objectstore
from tests.support import s3 as s3_support

PATH = {"addressing_style": "path"}


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param(
            s3client.MODELS,
            {"s3": PATH, "retries": {"max_attempts": 5, "mode": "standard"},
             "connect_timeout": 10, "read_timeout": 60},
            id="agent-models",
        ),
        pytest.param(
            s3client.TELEMETRY,
            {"s3": PATH, "retries": {"max_attempts": 2, "mode": "standard"},
             "connect_timeout": 3, "read_timeout": 10},
            id="agent-and-gateway-telemetry",
        ),
        pytest.param(
            objectstore.REPORTS,
            {"s3": PATH, "retries": {"max_attempts": 3}, "max_pool_connections": 16},
            id="operator-reports",
        ),
        pytest.param(
            s3_support.TESTS,
            {"s3": PATH, "retries": {"max_attempts": 2, "mode": "standard"},
             "connect_timeout": 5, "read_timeout": 30},
            id="tests",
        ),
    ],
)  # fmt: skip
def test_each_use_keeps_its_settings(
    profile: s3client.Profile, expected: dict[str, object]
) -> None:
    assert s3client.config(profile) == expected


def test_the_client_carries_the_profile_and_the_callers_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    client = s3client.client(
        profile=s3client.TELEMETRY,
        endpoint_url="http://127.0.0.1:1",
        access_key_id="k",
        secret_access_key="s",
    )
    assert client.meta.endpoint_url == "http://127.0.0.1:1"
    assert client.meta.region_name == "us-east-1"  # TELEMETRY's default region
    config: Any = client.meta.config  # botocore's Config sets its attributes dynamically
    assert (config.connect_timeout, config.read_timeout, config.s3) == (3, 10, PATH)
    given = s3client.client(profile=s3client.MODELS, region="eu-west-1", endpoint_url="")
    assert given.meta.region_name == "eu-west-1"
    assert given.meta.endpoint_url == "https://s3.eu-west-1.amazonaws.com"  # "": not given
    given_config: Any = given.meta.config
    assert given_config.read_timeout == 60
