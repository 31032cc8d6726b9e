"""A Prometheus scrape config from the chart's ServiceMonitors, the way the Prometheus Operator
writes one for a Prometheus with `serviceDiscoveryRole: EndpointSlice` (its pkg/prometheus/
promcfg.go, reduced to the fields our monitors use): Kubernetes discovery of EndpointSlices in
the monitor's namespaces, `keep` on the selected Services' labels and on the endpoint's port
name, the `namespace`, `service`, `job` and `endpoint` target labels, then the monitor's own
relabelings; scheme, path, interval, honorLabels, the bearer token (from a file here: the
operator reads it from the Secret) and TLS settings per endpoint.

Only for tests: a real Prometheus scrapes the test fleet with it (tests/e2e/test_scrape.py).
May import: the standard library. Called by: tests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _label(name: str) -> str:
    """A Kubernetes label or annotation name as Prometheus's meta label suffix."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def scrape_configs(
    monitor: Mapping[str, Any],
    *,
    kubeconfig: Path,
    token_files: Mapping[str, Path] | None = None,
    extra_relabel: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One scrape job per endpoint of `monitor` (a ServiceMonitor as the chart renders it).
    `token_files`: Secret name -> a file holding its key (what the operator would mount);
    `extra_relabel`: rules appended to each job (the test's loopback addresses)."""
    meta, spec = monitor["metadata"], monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [meta["namespace"]]
    keep = [
        {
            "source_labels": [
                f"__meta_kubernetes_service_label_{_label(key)}",
                f"__meta_kubernetes_service_labelpresent_{_label(key)}",
            ],
            "regex": f"({re.escape(value)});true",
            "action": "keep",
        }
        for key, value in sorted(spec["selector"].get("matchLabels", {}).items())
    ]
    jobs = []
    for i, endpoint in enumerate(spec["endpoints"]):
        port = endpoint["port"]
        relabel = [
            *keep,
            {
                "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
                "regex": re.escape(port),
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
            {"target_label": "endpoint", "replacement": port},
        ]
        for rule in endpoint.get("relabelings", []):
            relabel.append(
                {
                    "source_labels": rule["sourceLabels"],
                    "target_label": rule["targetLabel"],
                    **({"regex": rule["regex"]} if "regex" in rule else {}),
                    **({"replacement": rule["replacement"]} if "replacement" in rule else {}),
                }
            )
        relabel += extra_relabel or []
        job: dict[str, Any] = {
            "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "scheme": endpoint.get("scheme", "http"),
            "metrics_path": endpoint.get("path", "/metrics"),
            "scrape_interval": endpoint.get("interval", "30s"),
            "kubernetes_sd_configs": [
                {
                    "role": "endpointslice",
                    "kubeconfig_file": str(kubeconfig),
                    "namespaces": {"names": list(namespaces)},
                }
            ],
            "relabel_configs": relabel,
        }
        credentials = (endpoint.get("authorization") or {}).get("credentials")
        if credentials is not None:
            path = (token_files or {})[credentials["name"]]
            job["authorization"] = {"type": "Bearer", "credentials_file": str(path)}
        tls = endpoint.get("tlsConfig") or {}
        if tls:
            job["tls_config"] = {
                k: v
                for k, v in {"insecure_skip_verify": tls.get("insecureSkipVerify")}.items()
                if v is not None
            }
        jobs.append(job)
    return jobs


def static_job(
    monitor: Mapping[str, Any], *, target: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The job of a ServiceMonitor whose pods run outside the test's cluster (the operator, the
    gateway: local processes): its first endpoint's settings with a static target and the labels
    discovery would have given it."""
    endpoint, meta = monitor["spec"]["endpoints"][0], monitor["metadata"]
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": endpoint.get("interval", "30s"),
        "static_configs": [{"targets": [target], "labels": dict(labels)}],
    }
