"""The monthly executive report's headline: page 1's figures, how its cost adds up, the month
against the one before.

`tiles` are the six headline figures; `reconcile` shows the headline cost per million tokens as
its two parts (serving + idle); `idle_callout` says so when idle capacity is IDLE_CALLOUT of the
cost or more; `changes` sets the headline figures beside last month's. reports.monthly puts them
in its `MonthlyReport` beside the per-model and per-node rows.
May import: the standard library, `core.kit.cost`, reports.summary. Called by: reports.monthly.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import summary


@dataclass(frozen=True, slots=True)
class Tile:
    label: str
    value: str
    note: str


@dataclass(frozen=True, slots=True)
class Reconcile:
    """How the headline cost per million tokens adds up: what is allocated to the models (their
    own figures, averaged by tokens) plus the idle capacity spread over the same tokens."""

    all_in_cpm: float
    serving_cpm: float
    idle_cpm: float
    idle_usd: float
    total_usd: float

    @property
    def idle_share(self) -> float:
        return self.idle_usd / self.total_usd if self.total_usd > 0 else 0.0


IDLE_CALLOUT = 0.25  # an idle share of cost at or above this is called out on page 1


@dataclass(frozen=True, slots=True)
class Change:
    """One headline figure this month beside last month's."""

    label: str
    this: str
    before: str
    change: str  # `+12.3%`, `-4.0 pts`, `n/a`


def tiles(
    s: summary.PeriodSummary,
    *,
    rc: Reconcile | None,
    ref_cpm: float | None,
    found: list[Change],
    previous_label: str | None,
) -> list[Tile]:
    """Page 1's headline figures of month `s`: `rc` its cost reconciled, `ref_cpm` what the
    reference API charges per million of its tokens, `found` the changes on the month before
    (`previous_label`; empty: nothing to compare)."""
    f = s.fleet
    ref = f.reference if f else None
    p95 = s.fleet_quantile(0.95)
    swaps_total = len(s.swaps)
    outages = s.outages
    gap_days = s.fleet_gap_days
    cpm = f.loaded_cost_per_million if f else None
    saving = f.saving_ratio if f else None
    if not saving:  # 0: the priced nodes served no tokens, nothing to compare
        saving = None
    return [
        Tile(
            "Tokens served",
            _tokens(s.tokens),
            f"{s.requests:,} requests; {len(gap_days)} day(s) without data"
            + _versus(found, previous_label)
            if gap_days
            else f"{s.requests:,} requests" + _versus(found, previous_label),
        ),
        Tile(
            "Cost per million tokens",
            f"${cpm:,.2f}" if cpm is not None else "n/a",
            _cpm_note(rc)
            + (
                (
                    f"; vs ${ref_cpm:,.2f} at {ref.name}: {saving:.1f}x cheaper"
                    if saving and ref_cpm and ref
                    else ""
                )
                if saving is None or saving >= 1
                else f"; vs ${ref_cpm:,.2f} at {ref.name if ref else 'the reference'}: "
                f"{1 / saving:.1f}x dearer"
            ),
        ),
        Tile(
            "Total fleet cost",
            f"${f.total_usd:,.0f}" if f else "n/a",
            _cost_note(f, unpriced=len(s.unpriced_nodes)),
        ),
        Tile(
            "Telemetry uptime",
            f"{s.coverage:.1%}",
            f"of node-hours; {len({(o.start, o.end) for o in outages})} outage(s)",
        ),
        Tile(
            "p95 latency",
            f"{p95:.2f} s" if p95 is not None else "n/a",
            f"p50 {s.fleet_quantile(0.5) or 0:.2f} s, end to end",
        ),
        Tile(
            "Model swaps",
            f"{s.swaps_clean} of {swaps_total}",
            "completed with zero failed requests",
        ),
    ]


def idle_callout(rc: Reconcile | None) -> str | None:
    """Page 1's call-out when idle capacity is IDLE_CALLOUT of the month's cost or more."""
    if rc is not None and rc.idle_share >= IDLE_CALLOUT:
        return (
            f"Idle capacity was {rc.idle_share:.0%} of this month's cost (${rc.idle_usd:,.0f}: "
            f"Macs paid for while no request ran), ${rc.idle_cpm:,.2f} of the "
            f"${rc.all_in_cpm:,.2f} per million tokens. More traffic on the same Macs, or fewer "
            "Macs, lowers it."
        )
    return None


def reconcile(f: cost.FleetCost | None) -> Reconcile | None:
    """The headline (all-in) cost per million tokens as the sum of its two parts; None without
    cost inputs or tokens."""
    if f is None or not f.tokens or f.loaded_cost_per_million is None:
        return None
    serving = sum(m.allocated_usd for m in f.models)
    return Reconcile(
        all_in_cpm=f.loaded_cost_per_million,
        serving_cpm=cost.per_million(serving, f.tokens) or 0.0,
        idle_cpm=cost.per_million(f.idle_usd, f.tokens) or 0.0,
        idle_usd=f.idle_usd,
        total_usd=f.total_usd,
    )


def changes(s: summary.PeriodSummary, before: summary.PeriodSummary) -> list[Change]:
    """The headline figures of month `s` beside those of the month `before`."""

    def pct(now: float | None, then: float | None) -> str:
        if now is None or then is None or then == 0:
            return "n/a"
        return f"{(now - then) / then:+.1%}"

    def usd(v: float | None, digits: int = 0) -> str:
        return "n/a" if v is None else f"${v:,.{digits}f}"

    def cpm(x: summary.PeriodSummary) -> float | None:
        return x.fleet.loaded_cost_per_million if x.fleet else None

    def idle(x: summary.PeriodSummary) -> float | None:
        rc = reconcile(x.fleet)
        return rc.idle_share if rc else None

    def share(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0%}"

    p95, p95_before = s.fleet_quantile(0.95), before.fleet_quantile(0.95)
    idle_now, idle_then = idle(s), idle(before)
    return [
        Change(
            "Tokens served", _tokens(s.tokens), _tokens(before.tokens), pct(s.tokens, before.tokens)
        ),
        Change(
            "Requests", f"{s.requests:,}", f"{before.requests:,}", pct(s.requests, before.requests)
        ),
        Change(
            "Total fleet cost",
            usd(s.fleet.total_usd if s.fleet else None),
            usd(before.fleet.total_usd if before.fleet else None),
            pct(
                s.fleet.total_usd if s.fleet else None,
                before.fleet.total_usd if before.fleet else None,
            ),
        ),
        Change(
            "Cost per million tokens, all-in",
            usd(cpm(s), 2),
            usd(cpm(before), 2),
            pct(cpm(s), cpm(before)),
        ),
        Change(
            "Idle share of cost",
            share(idle_now),
            share(idle_then),
            "n/a"
            if idle_now is None or idle_then is None
            else f"{(idle_now - idle_then) * 100:+.1f} pts",
        ),
        Change(
            "p95 latency",
            "n/a" if p95 is None else f"{p95:.2f} s",
            "n/a" if p95_before is None else f"{p95_before:.2f} s",
            pct(p95, p95_before),
        ),
    ]


def _cpm_note(rc: Reconcile | None) -> str:
    """The headline's two parts: what the models' own figures add up to, and the idle share."""
    if rc is None:
        return "all-in, idle included"
    return f"all-in: ${rc.serving_cpm:,.2f} serving + ${rc.idle_cpm:,.2f} idle capacity"


def _versus(found: list[Change], label: str | None) -> str:
    """`; +3.2% on September 2026`: the tokens' change (nothing without a month to compare)."""
    if not found or label is None:
        return ""
    return f"; {found[0].change} on {label.split()[0][:3]}"


def _cost_note(f: cost.FleetCost | None, *, unpriced: int) -> str:
    if f is None:
        return "cost inputs missing"
    share = f" ({f.idle_usd / f.total_usd:.0%})" if f.total_usd > 0 else ""
    note = f"of which idle capacity ${f.idle_usd:,.0f}{share}"
    if unpriced:
        note += f"; {unpriced} node(s) without cost inputs left out"
    return note


def _tokens(v: int) -> str:
    if v >= 1e9:
        return f"{v / 1e9:.2f}B"
    if v >= 1e6:
        return f"{v / 1e6:.1f}M"
    return f"{v:,}"
