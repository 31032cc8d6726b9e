"""Prometheus exposition of the agent: conventional names, own registry, host gauges."""

from __future__ import annotations

import re

from mlxfleet_agent.telemetry import intervals, recorder


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
