"""The host's memory pressure level and the reading it comes from (telemetry.hoststats): macOS's
own level, the share available, Linux pressure stall information; the PSI file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxfleet_agent.telemetry import hoststats

GIB = 2**30
PSI = """some avg10={some:.2f} avg60=0.00 avg300=0.00 total=123
full avg10={full:.2f} avg60=0.00 avg300=0.00 total=45
"""


def test_the_psi_file_gives_some_and_full_of_the_last_ten_seconds() -> None:
    assert hoststats.parse_psi(PSI.format(some=12.5, full=3.25)) == (12.5, 3.25)
    assert hoststats.parse_psi("some avg10=1.00 avg60=0.00 avg300=0.00 total=1\n") == (1.0, 0.0)
    assert hoststats.parse_psi("") is None
    assert hoststats.parse_psi("garbage") is None


@pytest.mark.parametrize(
    ("available", "psi", "level", "said"),
    [
        pytest.param(50, None, "normal", "50.0% of memory available", id="plenty"),
        pytest.param(10, None, "warn", "10.0% of memory available", id="share-warn"),
        pytest.param(3, None, "critical", "3.0% of memory available", id="share-critical"),
        pytest.param(50, (12.0, 0.0), "warn", "PSI memory some avg10=12.00%", id="psi-some"),
        pytest.param(50, (40.0, 11.0), "critical", "full avg10=11.00%", id="psi-full"),
        pytest.param(3, (12.0, 0.0), "critical", "3.0% of memory available", id="worse-wins"),
        pytest.param(50, (9.99, 9.99), "normal", "PSI memory", id="psi-below"),
    ],
)
def test_the_worse_reading_decides_and_is_named(
    available: int, psi: tuple[float, float] | None, level: str, said: str
) -> None:
    got = hoststats.pressure(total=100 * GIB, available=available * GIB, psi=psi)
    assert got.level == level
    assert said in got.why
    assert got.why.split(",")[0] in got.why  # the deciding reading first


def test_macos_uses_its_own_level() -> None:
    got = hoststats.pressure(total=100 * GIB, available=1 * GIB, macos_level=2)
    assert (got.level, got.why) == ("warn", "macOS memory pressure level 2 (warn)")
    assert hoststats.pressure(total=1, available=1, macos_level=4).level == "critical"


def test_read_pressure_reads_the_psi_file_it_is_given(tmp_path: Path) -> None:
    psi = tmp_path / "memory.pressure"
    psi.write_text(PSI.format(some=55.0, full=20.0))
    got = hoststats.read_pressure(psi)
    if hoststats.IS_MACOS:  # macOS has its own level; no PSI there
        return
    assert got.level == "critical"
    assert "full avg10=20.00%" in got.why
    missing = hoststats.read_pressure(tmp_path / "absent")
    assert "PSI" not in missing.why  # no file: the share available alone
