"""Reads agents' telemetry objects from an S3-compatible bucket and writes reports back (boto3).

Layout (written by the agent's shipper, defined in `mlxfleet_agent.contract`):
`<prefix>/v1/date=YYYY-MM-DD/node=<node>/<interval-start>.jsonl`, one `TelemetryInterval` per
line. Besides those, plain object operations (list with sizes and times, get, conditional-free
put with metadata, batch delete) for the compacted days the reports layer writes. Every request
is counted by operation (`calls`), so benchmarks can say how many GETs a report made.
Works with any S3 endpoint (AWS, R2, MinIO, SeaweedFS): path-style addressing, SigV4.
May import: boto3 (botocore's errors; the client from `mlxfleet_common.s3client`), the standard
library, `mlxfleet_agent.contract`. Called by: reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from mlxfleet_agent import contract
from mlxfleet_common import s3client

log = logging.getLogger("mlxfleet_operator.objectstore")
ENV_PREFIX = "MLXFLEET_TELEMETRY_"
FETCH_WORKERS = 16
DELETE_BATCH = 1000  # S3 DeleteObjects takes at most 1,000 keys
# botocore's timeouts and retry mode, one pooled connection per parallel fetch
REPORTS = s3client.Profile(
    max_attempts=3, retry_mode=None, max_pool_connections=FETCH_WORKERS, default_region="us-east-1"
)


class ObjectStoreError(OSError):
    """The bucket could not be read or written (unreachable, denied, missing); names the object."""


@contextlib.contextmanager
def _store_errors(what: str) -> Iterator[None]:
    """Map boto errors to ObjectStoreError with the operation and the store's own reason."""
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise ObjectStoreError(f"{what}: {err.get('Code', '?')} {err.get('Message', '')}") from exc
    except BotoCoreError as exc:
        raise ObjectStoreError(f"{what}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class StoreConfig:
    bucket: str
    prefix: str = "mlxfleet-telemetry"
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: str | None
    ) -> StoreConfig:
        """`MLXFLEET_TELEMETRY_*` (the agent's names); explicit non-None overrides win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "bucket": env.get(ENV_PREFIX + "BUCKET"),
            "prefix": env.get(ENV_PREFIX + "PREFIX") or "mlxfleet-telemetry",
            "endpoint_url": env.get(ENV_PREFIX + "ENDPOINT_URL"),
            "region": env.get(ENV_PREFIX + "REGION"),
            "access_key_id": env.get(ENV_PREFIX + "ACCESS_KEY_ID"),
            "secret_access_key": env.get(ENV_PREFIX + "SECRET_ACCESS_KEY"),
        }
        values |= {k: v for k, v in overrides.items() if v is not None}
        if not values["bucket"]:
            raise ValueError("no bucket: pass --bucket or set MLXFLEET_TELEMETRY_BUCKET")
        return cls(**values)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object."""

    key: str
    size: int
    last_modified: datetime


class TelemetryStore:
    """The telemetry bucket: list and parse one day's intervals; put report files."""

    def __init__(self, config: StoreConfig, *, client: Any = None) -> None:
        self.config = config
        if client is None:
            client = s3client.client(
                profile=REPORTS,
                endpoint_url=config.endpoint_url,
                region=config.region,
                access_key_id=config.access_key_id,
                secret_access_key=config.secret_access_key,
            )
        self._s3 = client
        self.calls: Counter[str] = Counter()  # S3 requests by operation (GetObject, ...)
        self._calls_lock = threading.Lock()
        self._s3.meta.events.register("before-call.s3", self._count)

    def _count(self, model: Any = None, **_: Any) -> None:
        with self._calls_lock:
            self.calls[str(getattr(model, "name", "?"))] += 1

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object under `prefix` (all pages), with size and modification time."""
        paginator = self._s3.get_paginator("list_objects_v2")
        with _store_errors(f"list s3://{self.config.bucket}/{prefix}"):
            pages = list(paginator.paginate(Bucket=self.config.bucket, Prefix=prefix))
        return [
            ObjectInfo(str(o["Key"]), int(o.get("Size", 0)), o["LastModified"])
            for page in pages
            for o in page.get("Contents", [])
        ]

    def raw_objects(self, day: date) -> list[ObjectInfo]:
        """The per-interval objects the agents shipped for one UTC day."""
        prefix = contract.telemetry_date_prefix(self.config.prefix, day.isoformat())
        return [o for o in self.list_objects(prefix) if o.key.endswith(".jsonl")]

    def intervals_for_day(self, day: date) -> list[contract.TelemetryInterval]:
        """Every interval stored under one UTC day (fetched in parallel: one object per node
        and minute adds up); unreadable lines are logged and skipped."""
        return self.read_intervals([o.key for o in self.raw_objects(day)])

    def read_intervals(self, keys: Sequence[str]) -> list[contract.TelemetryInterval]:
        """The intervals in these objects (fetched in parallel); unreadable lines skipped."""
        bodies = self.get_many(keys)
        out: list[contract.TelemetryInterval] = []
        for key, body in zip(keys, bodies, strict=True):
            out += self.parse(key, body)
        return out

    def get_many(self, keys: Sequence[str]) -> list[bytes]:
        with ThreadPoolExecutor(max_workers=FETCH_WORKERS) as pool:
            return list(pool.map(self._get, keys))

    def _get(self, key: str) -> bytes:
        return self.get_object(key)[0]

    def get_object(self, key: str) -> tuple[bytes, dict[str, str]]:
        """An object's body and its user metadata (`x-amz-meta-*`, lower-case names)."""
        with _store_errors(f"read s3://{self.config.bucket}/{key}"):
            found = self._s3.get_object(Bucket=self.config.bucket, Key=key)
            data: bytes = found["Body"].read()
        return data, {str(k).lower(): str(v) for k, v in (found.get("Metadata") or {}).items()}

    def put_object(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        with _store_errors(f"write s3://{self.config.bucket}/{key}"):
            self._s3.put_object(
                Bucket=self.config.bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                Metadata=dict(metadata or {}),
            )

    def delete_objects(self, keys: Sequence[str]) -> int:
        """Delete these keys (batches of 1,000; a missing key is no error); returns the count."""
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            with _store_errors(f"delete {len(batch)} objects in s3://{self.config.bucket}"):
                answer = self._s3.delete_objects(
                    Bucket=self.config.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise ObjectStoreError(
                    f"delete s3://{self.config.bucket}/{first.get('Key')}: "
                    f"{first.get('Code', '?')} {first.get('Message', '')} "
                    f"({len(errors)} of {len(batch)} keys not deleted)"
                )
        return len(keys)

    @staticmethod
    def parse(key: str, body: bytes) -> list[contract.TelemetryInterval]:
        """The intervals in one raw object's body; unreadable or newer-schema lines skipped."""
        out: list[contract.TelemetryInterval] = []
        for line in body.decode(errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                interval = contract.TelemetryInterval.model_validate_json(line)
            except ValidationError as exc:
                log.warning("skipping unreadable telemetry line in %s: %s", key, exc)
                continue
            if interval.schema_version > contract.TELEMETRY_SCHEMA_VERSION:
                log.warning("skipping %s: schema version %d is newer", key, interval.schema_version)
                continue
            out.append(interval)
        return out

    def put_interval(self, interval: contract.TelemetryInterval) -> str:
        """Write one interval at its canonical key (fixtures, backfills); returns the key."""
        key = contract.telemetry_key(self.config.prefix, interval.node, interval.interval_start)
        body = interval.model_dump_json().encode() + b"\n"
        self.put_object(key, body, content_type="application/x-ndjson")
        return key

    def report_key(self, name: str) -> str:
        """Where report file `name` lives: `<prefix>/reports/<name>`."""
        return "/".join(p for p in (self.config.prefix.strip("/"), "reports", name) if p)

    def put_report(self, name: str, data: bytes, *, content_type: str) -> str:
        """Write a rendered report under `<prefix>/reports/<name>`; returns the key."""
        key = self.report_key(name)
        self.put_object(key, data, content_type=content_type)
        return key
