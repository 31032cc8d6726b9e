"""Durations as people write them in manifests (`20s`, `10m`, `1h30m`, `500ms`) as `timedelta`.

Pure: the subset of Go's `time.ParseDuration` that Kubernetes' CEL `duration()` reads alike:
one or more `<whole number><unit>` with units ms, s, m, h (no sign, no fraction, no spaces).
`PATTERN` is the same text in Python `re` and RE2, so the CRD refuses what `parse` refuses.
May import: the standard library only. Called by: api.fields (the Duration field type), core
(spec.idleTimeout).
"""

from __future__ import annotations

import re
from datetime import timedelta

PATTERN = r"([0-9]{1,6}(ms|s|m|h))+"
MAX_LENGTH = 16  # with 6 digits a part, never beyond what CEL's duration() holds (290 years)
ALLOWED = "a duration such as 20s, 10m, 1h30m or 500ms (whole numbers; units ms, s, m, h)"
_DURATION = re.compile(PATTERN)
_PART = re.compile(r"([0-9]+)(ms|s|m|h)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
}


def parse(text: str) -> timedelta:
    """`20s` -> 20 seconds; ValueError naming the allowed form otherwise."""
    if len(text) > MAX_LENGTH or not _DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not {ALLOWED}")
    return sum((int(n) * _UNITS[unit] for n, unit in _PART.findall(text)), timedelta())


def format_duration(value: timedelta) -> str:
    """The shortest text `parse` reads back as `value` (whole milliseconds): `1h30m`, `20s`."""
    ms = round(value.total_seconds() * 1000)
    if ms <= 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
