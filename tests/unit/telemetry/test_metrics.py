"""Prometheus exposition of the agent: conventional names, own registry, host gauges."""

from __future__ import annotations

import random
import re
from pathlib import Path

import prometheus_client
import trustme
from cryptography import x509

from mlxfleet_agent import contract
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
    """A second request adds to the first one's series, each label value lands under its own
    name, and another slot or outcome is a series of its own."""
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


def _record(slot: str, model: str, rng: random.Random) -> recorder.RequestRecord:
    stream = rng.random() < 0.5
    return recorder.RequestRecord(
        slot=slot,
        served_name=model,
        source="file:///m",
        endpoint=rng.choice(("chat.completions", "completions")),
        stream=stream,
        prompt_tokens=rng.randrange(1, 500),
        completion_tokens=rng.randrange(0, 40),
        queue_wait_s=rng.choice((0.0, rng.random() * 3)),
        ttft_s=rng.choice((None, rng.random() * 20)),
        e2e_s=rng.random() * 90,  # beyond the highest bucket too (+Inf)
        error_kind=rng.choice((None, None, None, "backend_5xx", "timeout")),
    )


def _family_lines(text: str, families: set[str] | None = None) -> tuple[list[str], set[str]]:
    """The lines of `families` (all when None; named as their TYPE lines name them), sorted,
    with each `_created` sample's value (a clock reading) cut off, and the families' names."""
    lines = text.splitlines()
    if families is None:
        families = {line.split(" ")[2] for line in lines if line.startswith("# TYPE")}
    names = {f + suffix for f in families for suffix in ("", "_bucket", "_count", "_sum")}
    kept = []
    for line in lines:
        name = line.split(" ")[2] if line.startswith("#") else re.split(r"[{ ]", line)[0]
        if name in names:
            kept.append(line.rpartition(" ")[0] if name.endswith("_created") else line)
    return sorted(kept), families


def test_request_families_read_as_prometheus_clients_own() -> None:
    """The request families are plain numbers exported at scrape time: a scrape shows, line for
    line, what prometheus_client's own Counter, Histogram and Gauge families fed the same
    requests show (names, labels, `le` values, cumulative buckets, sums, and a `_created` per
    series), over more requests than one fold takes and with some still in flight."""
    rng = random.Random(27)
    tel = recorder.Telemetry(node="mac-1")
    ref = prometheus_client.CollectorRegistry()
    sm, lat = ["slot", "model"], contract.LATENCY_BUCKETS_S
    ns = metrics.NAMESPACE
    requests = prometheus_client.Counter(
        f"{ns}_requests_total",
        "Finished data-plane requests.",
        [*sm, "endpoint", "stream", "outcome"],
        registry=ref,
    )
    errors = prometheus_client.Counter(
        f"{ns}_request_errors_total", "Failed requests by kind.", [*sm, "kind"], registry=ref
    )
    prompt = prometheus_client.Counter(
        f"{ns}_prompt_tokens_total", "Prompt (input) tokens served.", sm, registry=ref
    )
    completion = prometheus_client.Counter(
        f"{ns}_completion_tokens_total", "Completion (output) tokens served.", sm, registry=ref
    )
    ttft, tpot, e2e, wait = (
        prometheus_client.Histogram(f"{ns}_{name}", help_, sm, buckets=b, registry=ref)
        for name, help_, b in (
            (
                "time_to_first_token_seconds",
                "Time to the first token (streams) or to the whole answer.",
                lat,
            ),
            (
                "time_per_output_token_seconds",
                "Decode time per output token after the first.",
                contract.TOKEN_LATENCY_BUCKETS_S,
            ),
            ("request_duration_seconds", "End-to-end request latency at the agent.", lat),
            ("queue_wait_seconds", "Time a request waited for its slot (swaps in hold mode).", lat),
        )
    )
    in_flight = prometheus_client.Gauge(
        f"{ns}_in_flight_requests", "Requests in flight per slot.", ["slot"], registry=ref
    )
    open_: dict[str, int] = {}
    for i in range(recorder.FOLD_EVERY * 3 + 5):
        slot, model = rng.choice((("chat", "llama"), ("chat", "qwen"), ("embed", "bge")))
        tel.request_started(slot)
        open_[slot] = open_.get(slot, 0) + 1
        if i % 7 == 3:  # stays in flight
            in_flight.labels(slot).set(open_[slot])
            continue
        r = _record(slot, model, rng)
        tel.request_finished(r)
        open_[slot] -= 1
        in_flight.labels(slot).set(open_[slot])
        outcome = "error" if r.error_kind else "ok"
        requests.labels(slot, model, r.endpoint, str(r.stream).lower(), outcome).inc()
        if r.error_kind:
            errors.labels(slot, model, r.error_kind).inc()
        prompt.labels(slot, model).inc(r.prompt_tokens)
        completion.labels(slot, model).inc(r.completion_tokens)
        if r.ttft_s is not None:
            ttft.labels(slot, model).observe(r.ttft_s)
        if (per_token := recorder.time_per_output_token(r)) is not None:
            tpot.labels(slot, model).observe(per_token)
        e2e.labels(slot, model).observe(r.e2e_s)
        wait.labels(slot, model).observe(r.queue_wait_s)
    theirs, families = _family_lines(prometheus_client.generate_latest(ref).decode())
    ours, _ = _family_lines(tel.metrics.exposition().decode(), families)
    assert len(families) == 17  # 9 families, and the _created of the 4 counters and 4 histograms
    assert sum("_created{" in line for line in theirs) == 48
    assert ours == theirs


def test_every_read_sees_the_requests_not_yet_folded() -> None:
    """A request's two calls are logged and folded in batches; whatever reads the figures
    folds first, so one request (far fewer than a batch) is seen by each of them."""
    now = [1_000_000.0]
    tel = recorder.Telemetry(node="mac-1", idle_watts=5, busy_watts=40, clock=lambda: now[0])
    tel.request_started("chat")
    assert tel.host_view()["power_watts"] == 40  # busy from the request's start
    assert 'mlxfleet_agent_in_flight_requests{slot="chat"} 1.0' in tel.metrics.exposition().decode()
    now[0] += 2
    tel.request_finished(_record("chat", "llama", random.Random(1)))
    assert tel.counters()["requests_total"] == 1
    assert tel.host_view()["power_watts"] == 5
    [slot] = tel.checkpoint().slots
    assert (slot.requests, slot.busy_seconds) == (1, 2.0)
    tel.request_started("chat")
    now[0] += 100  # past the interval's end
    closed = tel.roll()
    assert closed is not None
    assert closed.slots[0].requests == 1
    assert closed.slots[0].busy_seconds > 2.0  # the second request's busy time until the end
