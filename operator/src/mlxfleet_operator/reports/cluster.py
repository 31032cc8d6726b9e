"""Lists the InferenceNodes a report prices (`mlxfleet report ... --from-cluster`).

Reads from the API server named by `--kubeconfig`, else `$KUBECONFIG` / `~/.kube/config`, else
the Pod's ServiceAccount (in a CronJob). Needs only `list` on `inferencenodes.mlxfleet.io`
(manifests/cronjobs/rbac.yaml). A node whose `spec.cost` does not parse is kept without cost
inputs (the report names it), so one bad object never stops a report.
May import: kubernetes, pydantic, the standard library, `api`, reports.inventory. Called by: cli.
"""

from __future__ import annotations

import os
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from mlxfleet_operator.api import inferencenode, resources
from mlxfleet_operator.reports import inventory


class ClusterError(ValueError):
    """The InferenceNodes could not be listed; the message says from where and why."""


def _api_client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    config_file = kubeconfig or os.environ.get("KUBECONFIG")
    if config_file is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        return kubernetes.client.ApiClient()
    client = kubernetes.config.new_client_from_config(config_file=config_file)  # type: ignore[no-untyped-call]
    return cast(kubernetes.client.ApiClient, client)


def inference_nodes(
    *, kubeconfig: str | None = None, selector: str | None = None
) -> list[inventory.ClusterNode]:
    """Every InferenceNode (matching the label `selector`), by name."""
    where = kubeconfig or os.environ.get("KUBECONFIG") or "the in-cluster or default kubeconfig"
    try:
        api = _api_client(kubeconfig)
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise ClusterError(f"cannot load a Kubernetes configuration ({where}): {exc}") from exc
    try:
        found = kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(
            resources.GROUP,
            resources.VERSION,
            resources.INFERENCE_NODE.plural,
            label_selector=selector or "",
        )
    except ApiException as exc:
        raise ClusterError(
            f"cannot list InferenceNodes ({where}): {exc.status} {exc.reason}"
        ) from exc
    except Exception as exc:  # urllib3 connection errors and the like
        raise ClusterError(f"cannot list InferenceNodes ({where}): {exc}") from exc
    finally:
        api.close()  # type: ignore[no-untyped-call]
    body = cast(dict[str, Any], found)
    nodes: list[inventory.ClusterNode] = []
    for item in body.get("items") or []:
        name = str((item.get("metadata") or {}).get("name") or "")
        raw = (item.get("spec") or {}).get("cost")
        try:
            spec_cost = None if raw is None else inferencenode.Cost.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = "".join(f".{p}" for p in first["loc"])
            problem = f"spec.cost{path}: {first['msg']}"
            nodes.append(inventory.ClusterNode(name=name, cost=None, problem=problem))
            continue
        nodes.append(inventory.ClusterNode(name=name, cost=spec_cost))
    return sorted(nodes, key=lambda n: n.name)
