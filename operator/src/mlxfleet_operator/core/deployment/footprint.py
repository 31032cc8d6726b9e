"""How much memory one replica of a ModelDeployment needs, and what to say while nobody knows.

`spec.resources.memory` when set, else the agent's shared estimate (`mlxfleet_agent.sizing`:
weights + KV cache + runtime overhead) from any node with the weights cached. When no node knows
the model, the handler asks eligible agents one after another to fetch and size it (`Prefetch`
answers, stopping at the first `settled` one); `sized` turns those answers into the footprint or
the verdict the deployment shows meanwhile (with the download's progress while it fetches).
May import: the standard library, `api`, the agent `contract` and `sizing`, `core.kit.conditions`,
`core.fleet` (`placement`, `facts`). Called by: the ModelDeployment handler.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import conditions

R = cond.Reason


def footprint(
    md: mdep.ModelDeployment,
    facts: Sequence[f.NodeFacts],
    extra: Sequence[contract.CachedModel] = (),
) -> int:
    """Bytes per replica: spec.resources.memory, else the shared estimate from any node that has
    the weights cached (size + shape; `extra`: a prefetch answer). Raises
    sizing.UnknownModelSize when nobody knows yet."""
    override = md.spec.memory_bytes()
    if override is not None:
        return override
    command = md.spec.engine.command
    if command is not None:  # the command engine declares it: the agent cannot tell either
        return command.memory_bytes
    model = md.model_ref()
    known = [c for fact in facts if fact.state is not None for c in fact.state.cached_models]
    for cached in [*extra, *known]:
        if ModelRef.of(cached) != model or cached.shape is None or cached.size_bytes <= 0:
            continue
        est = sizing.estimate(
            weights_bytes=cached.size_bytes,
            shape=cached.shape,
            context_length=md.spec.context_length,
            max_concurrency=md.spec.max_concurrency,
            kv_bits=md.spec.server.kv_bits,
        )
        return est.total_bytes
    raise sizing.UnknownModelSize(f"size of {model.source} is not known on any node yet")


def known(md: mdep.ModelDeployment, facts: Sequence[f.NodeFacts]) -> int | None:
    """The footprint when the spec or a node already knows it, else None (ask an agent)."""
    try:
        return footprint(md, facts)
    except sizing.UnknownModelSize:
        return None


def sized(
    md: mdep.ModelDeployment,
    facts: Sequence[f.NodeFacts],
    *,
    probe: placement.Decision,
    answers: Sequence[f.Prefetch],
) -> int | conditions.Verdict:
    """The footprint from the agents' prefetch answers (in the order they were asked), or the
    verdict to show: nothing matches (Stalled), the source cannot exist (Stalled), fetched but
    still unsized, every fetch failed for now (retried on every reconcile, with the agents' own
    words), or no Ready node may take the model yet."""
    if probe.fits_nowhere:
        return conditions.Verdict(
            False, placement.nowhere_reason(probe), probe.rejection_summary(), stalled=True
        )
    last = answers[-1] if answers else None
    if last is not None and last.settled:
        if last.error is not None:  # cannot exist as given: a person must act
            text = f"{last.node}: {last.error}"
            return conditions.Verdict(False, R.SOURCE_INVALID, text, stalled=True)
        try:
            return footprint(md, facts, extra=[last.cached] if last.cached else [])
        except sizing.UnknownModelSize as exc:
            text = f"fetching on {last.node}: {exc}"
            if last.cached is not None and last.cached.download is not None:
                got = fields.DownloadStatus.of(last.cached.download)
                text = f"downloading {got.describe()} on {last.node} (sized once on disk)"
            return conditions.Verdict(False, R.SIZE_UNKNOWN, text, reconciling=True)
    if answers:
        failures = "; ".join(f"{a.node}: {a.error}" for a in answers)
        text = "fetching the model failed, retrying: " + failures
        return conditions.Verdict(False, R.SOURCE_UNAVAILABLE, text, reconciling=True)
    return conditions.Verdict(
        False,
        R.WAITING_FOR_CAPACITY,
        f"no Ready node may take the model to size it: {probe.rejection_summary()}",
        reconciling=True,
    )
