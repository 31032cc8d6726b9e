"""Prometheus exposition of the agent: conventional names, own registry, host gauges."""

from __future__ import annotations

import re
from pathlib import Path

import trustme
from cryptography import x509

from mlxfleet_agent.host import certs
from mlxfleet_agent.telemetry import intervals, metrics, recorder


def test_exposition_has_conventional_names_and_values() -> None:
    tel = recorder.Telemetry(node="mac-1", idle_watts=5, busy_watts=40)
    tel.request_started("chat")
    tel.request_finished(
        recorder.RequestRecord(
            slot="chat",
            served_name="llama",
            source="file:///m",
            endpoint="chat.completions",
            stream=True,
            prompt_tokens=12,
            completion_tokens=30,
            queue_wait_s=0.0,
            ttft_s=0.1,
            e2e_s=0.7,
            error_kind=None,
        )
    )
    tel.add_host_sample(
        intervals.HostSample(
            memory_total_bytes=1000,
            memory_used_bytes=600,
            memory_available_bytes=400,
            pressure="normal",
        )
    )
    text = tel.metrics.exposition().decode()
    assert re.search(
        r'^mlxfleet_agent_requests_total\{endpoint="chat.completions",model="llama",'
        r'outcome="ok",slot="chat",stream="true"\} 1.0$',
        text,
        re.M,
    )
    assert re.search(
        r'^mlxfleet_agent_prompt_tokens_total\{model="llama",slot="chat"\} 12.0$', text, re.M
    )
    assert re.search(
        r'^mlxfleet_agent_completion_tokens_total\{model="llama",slot="chat"\} 30.0$', text, re.M
    )
    assert re.search(
        r"^mlxfleet_agent_time_to_first_token_seconds_bucket"
        r'\{le="0.1",model="llama",slot="chat"\} 1.0$',
        text,
        re.M,
    )
    assert "mlxfleet_agent_time_per_output_token_seconds_count" in text
    assert "mlxfleet_agent_request_duration_seconds_sum" in text
    assert re.search(r'^mlxfleet_agent_in_flight_requests\{slot="chat"\} 0.0$', text, re.M)
    assert re.search(r"^mlxfleet_agent_memory_available_bytes 400.0$", text, re.M)
    assert re.search(r'^mlxfleet_agent_memory_pressure\{level="normal"\} 1.0$', text, re.M)
    assert re.search(r'^mlxfleet_agent_power_watts\{source="estimated"\} 5.0$', text, re.M)


def test_each_telemetry_has_its_own_registry() -> None:
    a, b = recorder.Telemetry(), recorder.Telemetry()
    a.swap_finished(slot="chat", outcome="Completed")
    assert (
        'mlxfleet_agent_swaps_total{outcome="Completed",slot="chat"} 1.0'
        in a.metrics.exposition().decode()
    )
    assert "swaps_total{" not in b.metrics.exposition().decode()


def test_backend_restarts_are_counted_per_slot() -> None:
    tel = recorder.Telemetry()
    tel.backend_restarted("chat")
    tel.backend_restarted("chat")
    text = tel.metrics.exposition().decode()
    assert 'mlxfleet_agent_backend_restarts_total{slot="chat"} 2.0' in text
    assert tel.counters()["backend_restarts_total"] == 2


def test_heat_series_appear_only_when_the_host_reports_them() -> None:
    """The names the alert rules read (MlxfleetNodeThermal*): one-hot thermal pressure, GPU
    and CPU temperature, GPU utilisation; nothing at all from a host reading without them."""
    readings: dict[str, object] = {"uptime_seconds": 1.0}
    m = metrics.AgentMetrics()
    m.add_host_collector(lambda: readings)
    assert "thermal_pressure" not in m.exposition().decode()
    assert "temperature" not in m.exposition().decode()
    readings |= {
        "thermal": "serious",
        "gpu_temperature_celsius": 81.5,
        "cpu_temperature_celsius": 77.0,
        "gpu_utilization_ratio": 0.9,
    }
    text = m.exposition().decode()
    levels = dict(
        re.findall(r'^mlxfleet_agent_thermal_pressure\{level="(\w+)"\} (\S+)$', text, re.M)
    )
    assert levels == {"nominal": "0.0", "fair": "0.0", "serious": "1.0", "critical": "0.0"}
    assert "mlxfleet_agent_gpu_temperature_celsius 81.5" in text
    assert "mlxfleet_agent_cpu_temperature_celsius 77.0" in text
    assert "mlxfleet_agent_gpu_utilization_ratio 0.9" in text


def test_the_served_certificates_expiry_is_read_from_its_pem(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("mac-1.local")
    pem = tmp_path / "tls.crt"
    cert.cert_chain_pems[0].write_to_path(str(pem))
    expected = x509.load_pem_x509_certificate(pem.read_bytes()).not_valid_after_utc.timestamp()
    assert certs.expires_at(pem) == expected
    (tmp_path / "junk.pem").write_text("not a certificate")
    assert certs.expires_at(tmp_path / "junk.pem") is None
    assert certs.expires_at(tmp_path / "missing.pem") is None


def test_repeated_requests_count_in_the_same_series() -> None:
    """The recorder remembers each series (`AgentMetrics.child`): a second request adds to the
    first one's series, each label value lands under its own name, and another slot or outcome
    is a series of its own."""
    tel = recorder.Telemetry(node="mac-1")

    def finish(slot: str, error: str | None) -> None:
        tel.request_started(slot)
        tel.request_finished(
            recorder.RequestRecord(
                slot=slot,
                served_name="llama",
                source="file:///m",
                endpoint="completions",
                stream=False,
                prompt_tokens=5,
                completion_tokens=1,
                queue_wait_s=0.0,
                ttft_s=None,
                e2e_s=0.01,
                error_kind=error,
            )
        )

    for slot, error in (("a", None), ("a", None), ("a", "backend_died"), ("b", None)):
        finish(slot, error)
    text = tel.metrics.exposition().decode()
    series = 'mlxfleet_agent_requests_total{endpoint="completions",model="llama",'
    assert f'{series}outcome="ok",slot="a",stream="false"}} 2.0' in text
    assert f'{series}outcome="error",slot="a",stream="false"}} 1.0' in text
    assert f'{series}outcome="ok",slot="b",stream="false"}} 1.0' in text
    assert (
        'mlxfleet_agent_request_errors_total{kind="backend_died",model="llama",slot="a"} 1.0'
        in text
    )
    assert 'mlxfleet_agent_prompt_tokens_total{model="llama",slot="a"} 15.0' in text
    assert 'mlxfleet_agent_request_duration_seconds_count{model="llama",slot="b"} 1.0' in text
    assert 'mlxfleet_agent_in_flight_requests{slot="a"} 0.0' in text
