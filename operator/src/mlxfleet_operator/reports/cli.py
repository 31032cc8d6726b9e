"""`mlxfleet report weekly|monthly|sample|compact`: the reports, and the telemetry compaction.

- `weekly [--week YYYY-Www]`: Markdown + HTML placement/cost diff against the week before
  (default: the last complete ISO week).
- `monthly [--month YYYY-MM]`: executive PDF (default: the last complete month), with every
  node and model in two CSV files next to it (reports.detail).
- `sample --out DIR`: both, from the built-in fixture month (no bucket needed).
- `deliver STEM` (e.g. `monthly-2026-05`): send a report stored in the bucket again, on the
  channels its delivery record does not show delivered (reports.delivery).
- `compact [--days N | --day YYYY-MM-DD ...] [--delete-raw [--retention-days N]]`: roll each
  day's per-interval objects into one Parquet object (see reports.compaction); the reports read
  compacted days with one GET each and only the other days object by object.
The bucket comes from `--bucket/--prefix/--endpoint-url/--region` or `MLXFLEET_TELEMETRY_*`;
credentials from `MLXFLEET_TELEMETRY_ACCESS_KEY_ID/SECRET_ACCESS_KEY` or boto3's AWS_* chain.
`--write-back` also stores the files under `<prefix>/reports/` in the same bucket; then, when
report.yaml has a `delivery` section, the report is sent by e-mail and/or webhook (exit 3 when a
channel still failed after its retries: the report stays in the bucket, the record says why).
Nodes and cost inputs: `--from-cluster` reads the InferenceNodes (their `spec.cost`; telemetry
matches them by name) from `--kubeconfig`, `$KUBECONFIG` or the Pod's ServiceAccount, optionally
only those matching `--node-selector`; `--config` report.yaml overrides cost fields per node and
maps other telemetry names (`aliases`); without `--from-cluster` its `nodes` are the inventory.
May import: reports, adapters.objectstore. Called by: `mlxfleet_operator.cli` (mlxfleet report).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import (
    cluster,
    compaction,
    config,
    delivery,
    detail,
    fixture,
    inventory,
    monthly,
    partials,
    render,
    source,
    summary,
    weekly,
)

log = logging.getLogger("mlxfleet_operator.reports")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlxfleet report", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="kind", required=True)
    for name, help_text in (
        ("weekly", "weekly placement and cost diff (Markdown + HTML)"),
        ("monthly", "monthly executive PDF"),
        ("sample", "both reports from the built-in fixture month, no bucket"),
    ):
        sp = sub.add_parser(name, help=help_text)
        sp.add_argument("--out", type=Path, default=Path("reports-out"), help="output folder")
        if name == "sample":
            continue
        _bucket_flags(sp)
        if name == "weekly":
            sp.add_argument("--week", help="ISO week, e.g. 2026-W42 (default: last complete)")
        else:
            sp.add_argument("--month", help="YYYY-MM (default: last complete month)")
        sp.add_argument(
            "--config",
            type=Path,
            help="YAML: cost inputs (overrides), telemetry name aliases, reference price",
        )
        sp.add_argument(
            "--from-cluster",
            action="store_true",
            help="read the InferenceNodes (names, spec.cost) from the Kubernetes API server",
        )
        sp.add_argument(
            "--kubeconfig", help="with --from-cluster (default: $KUBECONFIG, in-cluster)"
        )
        sp.add_argument("--node-selector", help="with --from-cluster: label selector of the nodes")
        sp.add_argument(
            "--write-back", action="store_true", help="also put the files in the bucket"
        )
    dp = sub.add_parser(
        "deliver", help="send a report stored in the bucket on the channels not delivered yet"
    )
    dp.add_argument("stem", help="the report's name, e.g. monthly-2026-05 or weekly-2026-W42")
    _bucket_flags(dp)
    dp.add_argument("--config", type=Path, help="YAML with the delivery section")
    cp = sub.add_parser(
        "compact", help="roll each day's per-interval telemetry objects into one Parquet object"
    )
    _bucket_flags(cp)
    cp.add_argument(
        "--days",
        type=_positive,
        default=7,
        help="the last N complete UTC days (default 7: late telemetry is joined in)",
    )
    cp.add_argument(
        "--day",
        action="append",
        type=date.fromisoformat,
        default=[],
        help="compact this day, YYYY-MM-DD (repeatable; replaces --days)",
    )
    cp.add_argument(
        "--delete-raw",
        action="store_true",
        help="delete per-interval objects once their day is compacted and past the retention",
    )
    cp.add_argument(
        "--retention-days",
        type=_positive,
        default=35,
        help="keep per-interval objects this many days after their day (default 35)",
    )
    return p


def _bucket_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--bucket")
    sp.add_argument("--prefix")
    sp.add_argument("--endpoint-url")
    sp.add_argument("--region")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of days >= 1, got {text!r}")
    return value


def _store(args: argparse.Namespace) -> objectstore.TelemetryStore:
    return objectstore.TelemetryStore(
        objectstore.StoreConfig.from_env(
            bucket=args.bucket,
            prefix=args.prefix,
            endpoint_url=args.endpoint_url,
            region=args.region,
        )
    )


def compact(args: argparse.Namespace, *, now: datetime) -> int:
    """`mlxfleet report compact`: one line per day; exit 2 when a day could not be done."""
    options = compaction.Options(delete_raw=args.delete_raw, retention_days=args.retention_days)
    days = sorted(set(args.day)) or compaction.window(now.date(), days=args.days, options=options)
    src = source.BucketSource(_store(args))
    failed = 0
    for day in days:
        try:
            print(compaction.compact_day(src, day, now=now, options=options).line())
        except (compaction.CompactionError, ValueError, OSError) as exc:
            failed += 1
            print(f"mlxfleet report compact: {day}: {exc}", file=sys.stderr)
    return 2 if failed else 0


def parse_week(text: str | None, *, today: date) -> summary.Period:
    if text is None:
        year, week, _ = (today - timedelta(days=7)).isocalendar()
        return summary.iso_week(year, week)
    m = re.fullmatch(r"(\d{4})-W(\d{1,2})", text)
    if not m:
        raise ValueError(f"--week must look like 2026-W42, got {text!r}")
    return summary.iso_week(int(m.group(1)), int(m.group(2)))


def parse_month(text: str | None, *, today: date) -> summary.Period:
    if text is None:
        last = today.replace(day=1) - timedelta(days=1)
        return summary.month(last.year, last.month)
    m = re.fullmatch(r"(\d{4})-(\d{2})", text)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"--month must look like 2026-10, got {text!r}")
    return summary.month(int(m.group(1)), int(m.group(2)))


def summarise(
    source: summary.TelemetrySource | partials.Partial,
    period: summary.Period,
    cfg: config.ReportConfig,
    *,
    cluster: list[inventory.ClusterNode] | None = None,
    extra_nodes: set[str] | None = None,
) -> summary.PeriodSummary:
    """One period's figures (from a source, or its telemetry `summary.load`ed already):
    telemetry renamed by the aliases, priced from the inventory."""
    inv = inventory.build(cfg, cluster)
    inputs, problems = inv.cost_inputs()
    loaded = source if isinstance(source, partials.Partial) else summary.load(source, period)
    s = summary.summarise(
        summary.rename(loaded, cfg.aliases),
        period,
        known_nodes=set(inv.nodes) | (extra_nodes or set()),
        namespaces=cfg.namespaces,
        cost_inputs=inputs,
        reference=cfg.reference_price(),
        inventory=set(inv.nodes),
    )
    s.cost_problems[:0] = problems
    return s


def weekly_files(
    source: summary.TelemetrySource,
    period: summary.Period,
    cfg: config.ReportConfig,
    *,
    cluster: list[inventory.ClusterNode] | None = None,
) -> dict[str, tuple[bytes, str]]:
    previous = summary.Period(
        period.start - timedelta(days=7),
        period.start,
        _week_label(period.start - timedelta(days=7)),
    )
    loaded, loaded_before = summary.load(source, period), summary.load(source, previous)
    this = summarise(loaded, period, cfg, cluster=cluster)
    before = summarise(loaded_before, previous, cfg, cluster=cluster, extra_nodes=set(this.nodes))
    this = summarise(loaded, period, cfg, cluster=cluster, extra_nodes=set(before.nodes))
    report = weekly.build(this, before)
    name = f"weekly-{period.label}"
    return {
        f"{name}.md": (render.weekly_markdown(report).encode(), "text/markdown; charset=utf-8"),
        f"{name}.html": (render.weekly_html(report).encode(), "text/html; charset=utf-8"),
        delivery.summary_name(name): (render.weekly_summary(report).encode(), delivery.TEXT),
    }


def monthly_files(
    source: summary.TelemetrySource,
    period: summary.Period,
    cfg: config.ReportConfig,
    *,
    cluster: list[inventory.ClusterNode] | None = None,
) -> dict[str, tuple[bytes, str]]:
    before = period.start - timedelta(days=1)
    previous = summary.month(before.year, before.month)
    last = summarise(source, previous, cfg, cluster=cluster)
    report = monthly.build(summarise(source, period, cfg, cluster=cluster), last)
    html = render.monthly_html(report)
    name = monthly.file_stem(period)
    return {
        f"{name}.html": (html.encode(), "text/html; charset=utf-8"),
        f"{name}.pdf": (render.pdf(html), "application/pdf"),
        delivery.summary_name(name): (render.monthly_summary(report).encode(), delivery.TEXT),
    } | {k: (v, "text/csv; charset=utf-8") for k, v in detail.files(report).items()}


def _week_label(start: date) -> str:
    year, week, _ = start.isocalendar()
    return f"{year}-W{week:02d}"


def _write(out: Path, files: dict[str, tuple[bytes, str]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (data, _) in files.items():
        (out / name).write_bytes(data)
        print(out / name)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    today = datetime.now(UTC).date()
    try:
        if args.kind == "sample":
            cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
            src = fixture.FixtureSource()
            files = weekly_files(src, summary.iso_week(2026, 42), cfg)
            files |= monthly_files(src, summary.month(*fixture.MONTH), cfg)
            _write(args.out, files)
            return 0
        if args.kind == "compact":
            return compact(args, now=datetime.now(UTC))
        cfg = config.ReportConfig.from_file(args.config)
        if args.kind == "deliver":
            return deliver_stored(args, cfg)
        if cfg.delivery is not None and not args.write_back:
            raise ValueError(
                "delivery (report.yaml) needs --write-back: a report is sent only once it is "
                "in the bucket"
            )
        if (args.kubeconfig or args.node_selector) and not args.from_cluster:
            raise ValueError("--kubeconfig and --node-selector need --from-cluster")
        nodes = (
            cluster.inference_nodes(kubeconfig=args.kubeconfig, selector=args.node_selector)
            if args.from_cluster
            else None
        )
        store = _store(args)
        bucket = source.BucketSource(store)
        if args.kind == "weekly":
            files = weekly_files(bucket, parse_week(args.week, today=today), cfg, cluster=nodes)
        else:
            month = parse_month(args.month, today=today)
            files = monthly_files(bucket, month, cfg, cluster=nodes)
    except (ValueError, OSError) as exc:
        print(f"mlxfleet report: {exc}", file=sys.stderr)
        return 2
    _write(args.out, files)
    if args.write_back:
        try:
            for name, (data, content_type) in files.items():
                key = store.put_report(name, data, content_type=content_type)
                print(f"s3://{store.config.bucket}/{key}")
        except objectstore.ObjectStoreError as exc:
            print(f"mlxfleet report: write-back failed (files kept): {exc}", file=sys.stderr)
            return 2
    if cfg.delivery is not None:
        stem = next(n for n in files if n.endswith(".summary.txt")).removesuffix(".summary.txt")
        return send(store, cfg.delivery, delivery.Report(stem, files))
    return 0


def send(
    store: objectstore.TelemetryStore, spec: config.DeliverySpec, report: delivery.Report
) -> int:
    """Deliver (skipping what an earlier run delivered), record, push; 0 when all delivered."""
    try:
        to = delivery.channels(spec)
    except ValueError as exc:
        print(f"mlxfleet report: {exc}", file=sys.stderr)
        return 2
    record = delivery.deliver(
        report,
        to,
        record=delivery.load_record(store, report.stem),
        attempts=spec.attempts,
        backoff_s=spec.backoff_seconds,
    )
    code = 0
    try:
        key = delivery.save_record(store, record)
        print(f"s3://{store.config.bucket}/{key}")
    except objectstore.ObjectStoreError as exc:
        print(f"mlxfleet report: delivery record not saved: {exc}", file=sys.stderr)
        code = 3
    if spec.pushgateway:
        try:
            delivery.push(spec.pushgateway, report, record)
        except OSError as exc:
            print(f"mlxfleet report: push to {spec.pushgateway} failed: {exc}", file=sys.stderr)
            code = 3
    for name in record.failed:
        state = record.channels[name]
        print(
            f"mlxfleet report: {report.stem} not delivered by {name} after {state.attempts} "
            f"attempts: {state.last_error} (the report is in the bucket; `mlxfleet report deliver "
            f"{report.stem}` or the next run sends it)",
            file=sys.stderr,
        )
    return 3 if record.failed else code


def deliver_stored(args: argparse.Namespace, cfg: config.ReportConfig) -> int:
    """`deliver STEM`: the stored report's files from the bucket, sent where not delivered."""
    if cfg.delivery is None:
        raise ValueError("deliver: the config (--config) has no delivery section")
    if not re.fullmatch(r"(weekly-\d{4}-W\d{2}|monthly-\d{4}-\d{2})", args.stem):
        raise ValueError(
            f"deliver: {args.stem!r} is not a report name (monthly-2026-05, weekly-2026-W42)"
        )
    store = _store(args)
    files = {}
    for name in delivery.Report.names(args.stem):
        try:
            data, _ = store.get_object(store.report_key(name))
        except objectstore.ObjectStoreError as exc:
            raise ValueError(f"deliver: {args.stem} is not in the bucket ({exc})") from exc
        kind = "application/pdf" if name.endswith(".pdf") else "text/html; charset=utf-8"
        files[name] = (data, delivery.TEXT if name.endswith(".txt") else kind)
    return send(store, cfg.delivery, delivery.Report(args.stem, files))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
