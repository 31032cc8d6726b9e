"""Sharded ModelDeployment reconcile: place groups (core.sharding), tell each chosen agent its
rank (slot spec with rank, world size and the ring hostfile), stop the ranks of broken groups,
publish rank 0 of each group (ready only when every rank is), write status with the groups.

May import: kopf, adapters, core, api. Called by: handlers.deployments (reconcile of a
ModelDeployment whose spec.sharding is set; not a registered handler of its own).
"""

from __future__ import annotations

from datetime import timedelta

import kopf

from mlxfleet_operator.adapters import events, kube, metrics, runtime
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core import conditions, naming, sharded, sharding
from mlxfleet_operator.core import events as core_events
from mlxfleet_operator.core.deployment import facts as dep
from mlxfleet_operator.core.deployment import slots
from mlxfleet_operator.core.deployment import status as mdstatus


def _fresh(rt: runtime.Runtime, facts: list[dep.NodeFacts]) -> frozenset[str]:
    """Nodes whose agent answered the latest poll (a rank's node that stopped answering takes
    its group out of the endpoints at once, before the heartbeat misses add up)."""
    now = runtime.now()
    limit = timedelta(seconds=rt.config.poll_seconds * 1.5 + 0.5)
    out = set()
    for f in facts:
        entry = rt.fleet.get(f.name)
        if entry is not None and entry.polled_at is not None and now - entry.polled_at <= limit:
            out.add(f.name)
    return frozenset(out)


async def reconcile(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    body: kopf.Body,
    facts: list[dep.NodeFacts],
    patch: kopf.Patch,
    *,
    endpoint: str,
    sized: int | conditions.Verdict,
) -> None:
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    slot = naming.slot_name(namespace, name)
    now = runtime.now()
    cached = sharded.cached_model(md, facts)
    if isinstance(sized, conditions.Verdict) or cached is None:
        verdict = sized if isinstance(sized, conditions.Verdict) else conditions.Verdict(
            False, cond.Reason.SIZE_UNKNOWN, "waiting for the model's shape", reconciling=True
        )  # fmt: skip
        kube.write_status(
            patch, mdstatus.unplaced_status(md, verdict, now=now, endpoint=endpoint), body
        )
        return
    by_name = {f.name: f for f in facts}
    fresh = _fresh(rt, facts)
    views = [
        sharded.node_view(
            f,
            slot=slot,
            fresh=f.name in fresh,
            last_seen=e.polled_at if (e := rt.fleet.get(f.name)) is not None else None,
        )
        for f in facts
    ]
    request = sharded.group_request(md, cached)
    broken = sharded.broken_groups(md, by_name, fresh, slot=slot)
    decision = sharding.place_groups(
        request,
        views,
        sharded.current(md),
        now=now,
        failover_delay=timedelta(seconds=rt.config.failover_delay),
    )
    forms = sharded.formations(md, decision, by_name, broken, slot=slot)
    outcomes: dict[str, dep.Outcome] = {}
    wanted: set[str] = set()
    for form in forms:
        for rank in form.plan.ranks:
            wanted.add(rank.node)
            fact = by_name.get(rank.node)
            if fact is None or rank.node not in fresh:
                continue
            spec = sharded.rank_spec(md, form, rank)
            observed = fact.slot(slot)
            if observed is not None and observed.spec == spec:
                continue
            put = slots.SlotRequest(rank.node, spec)
            if (outcome := await rt.fleet.put_slot(slot, put)) is not None:
                outcomes[rank.node] = outcome
    # survivors of broken groups not re-formed yet, and nodes no group wants: stop their ranks
    for f in facts:
        if f.name in wanted or f.name not in fresh or f.slot(slot) is None:
            continue
        await rt.fleet.delete_slot(f.name, slot)
    result = sharded.status(
        md,
        decision=decision,
        forms=forms,
        facts=by_name,
        fresh=fresh,
        outcomes=outcomes,
        endpoint=endpoint,
        now=now,
        reforming=broken,
        slot=slot,
    )
    await rt.kube.publish(
        body, [kube.Endpoint.from_url(n, url, ready=ok) for n, url, ok in result.endpoints]
    )
    for index in sorted(broken):
        if rt.first_time(
            str(body.metadata.uid),
            f"broken-{index}-{md.status.groups[0].id if md.status.groups else ''}",
        ):
            lost = f"group {index} lost a rank: re-forming"
            events.post(body, core_events.Event(cond.Reason.GROUP_REFORMING, lost, warning=True))
    kube.write_status(patch, result.status, body)
    metrics.DEPLOYMENT_READY.labels(namespace, name).set(result.status.ready_replicas or 0)
    metrics.DEPLOYMENT_WANTED.labels(namespace, name).set(md.spec.replicas)
