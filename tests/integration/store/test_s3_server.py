"""The s3_server fixture: a real S3 API that boto3 can sign against, with working credentials."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.support.s3 import S3Server

pytestmark = pytest.mark.s3


def test_put_get_list_roundtrip(s3_server: S3Server) -> None:
    bucket = s3_server.make_bucket()
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="a/b.txt", Body=b"hello")
    assert client.get_object(Bucket=bucket, Key="a/b.txt")["Body"].read() == b"hello"
    listed = client.list_objects_v2(Bucket=bucket, Prefix="a/")
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [("a/b.txt", 5)]


def test_wrong_secret_is_refused(s3_server: S3Server) -> None:
    bad = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint_url,
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=s3_server.region,
    )
    with pytest.raises(ClientError):
        bad.list_buckets()
    bad.close()


def test_env_points_boto3_at_server(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    bucket = s3_server.make_bucket()
    client = boto3.client("s3")
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]
    client.close()
    assert bucket in names
