"""The shared `s3client.Bucket` (the agent's and the gateway's telemetry store) against a real
S3 API: puts labelled by kind, every page listed with ETags, objects read back."""

from __future__ import annotations

import pytest

from mlxfleet_common import s3client
from tests.support.s3 import S3Server

pytestmark = pytest.mark.s3


def test_put_list_get(s3_server: S3Server) -> None:
    name = s3_server.make_bucket()
    bucket = s3client.Bucket(
        name,
        profile=s3client.TELEMETRY,
        endpoint_url=s3_server.endpoint_url,
        region=s3_server.region,
        access_key_id=s3_server.access_key,
        secret_access_key=s3_server.secret_key,
    )
    bucket.put("t/v1/a.jsonl", b'{"a":1}\n')
    bucket.put("t/months/m.json", b"{}")
    listed = dict(bucket.list("t/"))
    assert set(listed) == {"t/v1/a.jsonl", "t/months/m.json"}
    assert all(listed.values())  # each with its ETag
    assert bucket.get("t/v1/a.jsonl") == b'{"a":1}\n'
    client = s3_server.client()
    kinds = {key: client.head_object(Bucket=name, Key=key)["ContentType"] for key in listed}
    assert kinds == {"t/v1/a.jsonl": "application/x-ndjson", "t/months/m.json": "application/json"}
