"""`publishing.resync_after`: each (namespace, Service name) has its own resync period, between
`1 - PUBLISH_RESYNC_JITTER` times `resync` and `resync`. At 500 x 1,000 convergence published
every deployment within one minute and one period of 300 s made all their resyncs due within the
same minute 300 s later: 500-700 reads that slowed a swap phase running then (drain 144-153 s
against 58-96 s without them). Spread by a stable hash of the key, they fall due over a minute."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mlxfleet_operator.adapters import publishing

KEYS = [(f"team-{i % 7}", f"md-model-{i}") for i in range(1000)]


@pytest.mark.parametrize(
    "resync",
    [
        pytest.param(publishing.PUBLISH_RESYNC_S, id="default"),
        pytest.param(60.0, id="short"),
        pytest.param(0.0, id="zero"),
    ],
)
def test_a_period_is_never_longer_than_resync_nor_shorter_than_its_jittered_bound(
    resync: float,
) -> None:
    low = (1 - publishing.PUBLISH_RESYNC_JITTER) * resync
    periods = [publishing.resync_after(key, resync) for key in KEYS]
    assert all(low <= period <= resync for period in periods), (min(periods), max(periods))


def test_the_same_key_has_the_same_period_in_every_process() -> None:
    key = ("team-a", "md-llama")
    here = publishing.resync_after(key, 300.0)
    assert publishing.resync_after((key[0], key[1]), 300.0) == here
    assert publishing.resync_after(("team-a", "md-llama2"), 300.0) != here
    code = (
        "from mlxfleet_operator.adapters import publishing;"
        f"print(repr(publishing.resync_after({key!r}, 300.0)))"
    )
    for seed in ("1", "2"):  # the salted `hash()` would differ between these
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert float(out.stdout) == here


def test_keys_published_together_fall_due_over_the_whole_window() -> None:
    resync = publishing.PUBLISH_RESYNC_S
    window = publishing.PUBLISH_RESYNC_JITTER * resync  # 60 s
    periods = [publishing.resync_after(key, resync) for key in KEYS]
    assert max(periods) - min(periods) >= 0.8 * window
    buckets: dict[int, int] = {}
    for period in periods:
        bucket = int((resync - period) // 5)
        buckets[bucket] = buckets.get(bucket, 0) + 1
    assert len(buckets) == int(window // 5)  # every 5 s of the window has some
    assert max(buckets.values()) <= 0.15 * len(KEYS)  # none holds a burst (even: 1/12 each)
