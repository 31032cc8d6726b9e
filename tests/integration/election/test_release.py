"""Releasing the Lease on step-down, against the real API server as the operator's identity.

The case CI met: SIGTERM cancels the leader's renew while its PUT is already on the wire; the API
server applies it, the answer is never read, and the release then carries a stale
resourceVersion. The release must still land while the Lease names us, and must never clear a
holder that is not us.
May import: pytest, the operator's election adapters, tests.support. Called by: pytest.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from mlxfleet_operator.adapters import leader, lease
from mlxfleet_operator.core.kit import leadership
from mlxfleet_operator.dev import controlplane
from tests.support.kubeapi import AdminApi

TIMING = leadership.Timing(lease_duration=3, renew_deadline=2.0, retry_period=0.5)


def write_behind_its_back(api: AdminApi, *, holder: str | None = None) -> None:
    """A write the elector never saw the answer to: the renewTime moves on (and the holder
    changes when `holder` is given)."""
    body = api.lease()
    assert body is not None
    body["metadata"].pop("managedFields", None)
    body["spec"]["renewTime"] = (datetime.now(UTC) + timedelta(milliseconds=1)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    if holder is not None:
        body["spec"]["holderIdentity"] = holder
    assert api.put_lease(body).status_code == 200


async def lead_then_release(cluster: controlplane.ControlPlane, api: AdminApi, **kw: str) -> bool:
    store = lease.LeaseStore(
        await lease.connect(str(cluster.operator_kubeconfig)),
        namespace="mlxfleet-system",
        name="mlxfleet-operator",
        default_duration=TIMING.lease_duration,
    )
    try:
        elector = leader.Elector(store, identity="me", timing=TIMING)
        await asyncio.wait_for(elector.campaign(), 30)
        assert elector.leading()
        await asyncio.to_thread(write_behind_its_back, api, **kw)
        return await elector.release()
    finally:
        await store.aclose()


def test_release_lands_after_a_renew_whose_answer_was_lost(
    cluster: controlplane.ControlPlane,
) -> None:
    api = AdminApi(cluster.kubeconfig)
    api.delete_lease()
    try:
        assert asyncio.run(lead_then_release(cluster, api)) is True
        assert api.holder() is None  # handed over: a standby takes it within a retry period
    finally:
        api.delete_lease()
        api.close()


def test_release_never_clears_someone_elses_hold(cluster: controlplane.ControlPlane) -> None:
    api = AdminApi(cluster.kubeconfig)
    api.delete_lease()
    try:
        assert asyncio.run(lead_then_release(cluster, api, holder="intruder")) is False
        assert api.holder() == "intruder"
    finally:
        api.delete_lease()
        api.close()
