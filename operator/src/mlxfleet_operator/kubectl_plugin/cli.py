"""`kubectl mlxfleet` commands (console script `kubectl-mlxfleet`).

    kubectl mlxfleet status [-n NS]           nodes with memory bars, deployments, running plans
    kubectl mlxfleet approve PLAN [-n NS]     let a SwapPlan that waits for approval run
    kubectl mlxfleet approve swapplan PLAN    the same
    kubectl mlxfleet approve node NODE        let a Mac that joined itself take traffic
    kubectl mlxfleet cordon|uncordon NODE     no new replicas on NODE / undo cordon and drain
    kubectl mlxfleet drain NODE [--timeout S] cordon, move its replicas (make-before-break), wait
    kubectl mlxfleet top [--interval S]       tokens/s and TTFT per deployment, from the agents
    kubectl mlxfleet logs NODE [--tail N]     the agent's recent log lines (never prompts)

`--kubeconfig`, `KUBECONFIG`, `--context` and `-n` work as in kubectl, before or after the command.
Exit codes: 0 done, 1 the cluster or an agent refused, a named object does not exist (the error
names its kind, name and namespace) or a drain timed out, 2 bad input. `drain` reports to stderr
what is still on the node, with each deployment's Ready reason and message, when that changes and
at least every 30 s.
May import: kubernetes, kubectl_plugin modules, `api.resources`, `mlxfleet_agent.drainreport`.
Called by: the console script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_agent import drainreport
from mlxfleet_operator import __version__
from mlxfleet_operator.api import resources
from mlxfleet_operator.kubectl_plugin import agents, approval, kubeconfig, render

G, V = resources.GROUP, resources.VERSION


def _obj(found: object) -> dict[str, Any]:
    return cast(dict[str, Any], found)


def _items(found: object) -> list[dict[str, Any]]:
    return list(_obj(found)["items"])


class NotFound(Exception):
    """A named object the command needs does not exist: `InferenceNode "x" not found`."""

    def __init__(self, resource: resources.Resource, name: str, namespace: str | None) -> None:
        where = f' in namespace "{namespace}"' if resource.namespaced else ""
        super().__init__(f'{resource.kind} "{name}" not found{where}')


def _named(
    resource: resources.Resource, name: str, namespace: str | None, read: Callable[[], object]
) -> dict[str, Any]:
    """`read()`'s object; a 404 about that very object (not a missing CRD) is `NotFound`."""
    try:
        return _obj(read())
    except ApiException as exc:
        if exc.status == 404 and (_status(exc).get("details") or {}).get("name") == name:
            raise NotFound(resource, name, namespace) from None
        raise


def _status(exc: ApiException) -> dict[str, Any]:
    """The API server's Status object in an error answer ({} when the body is not one)."""
    try:
        found = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class Fleet:
    """The three kinds, read and patched through one API client."""

    def __init__(self, target: kubeconfig.Target) -> None:
        self.target = target
        self.custom = kubernetes.client.CustomObjectsApi(target.client)
        self.core = kubernetes.client.CoreV1Api(target.client)

    def nodes(self) -> list[dict[str, Any]]:
        return _items(self.custom.list_cluster_custom_object(G, V, "inferencenodes"))

    def node(self, name: str) -> dict[str, Any]:
        kind = resources.INFERENCE_NODE
        return _named(
            kind, name, None, lambda: self.custom.get_cluster_custom_object(G, V, kind.plural, name)
        )

    def plan(self, name: str, namespace: str) -> dict[str, Any]:
        kind = resources.SWAP_PLAN
        return _named(
            kind,
            name,
            namespace,
            lambda: self.custom.get_namespaced_custom_object(G, V, namespace, kind.plural, name),
        )

    def namespaced(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            return _items(self.custom.list_cluster_custom_object(G, V, plural))
        return _items(self.custom.list_namespaced_custom_object(G, V, namespace, plural))

    def patch_node(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(G, V, "inferencenodes", name, {"spec": spec})


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_status(fleet: Fleet, args: argparse.Namespace) -> int:
    ns = args.namespace  # None: every namespace
    print(
        render.status_screen(
            fleet.nodes(),
            fleet.namespaced("modeldeployments", ns),
            fleet.namespaced("swapplans", ns),
        )
    )
    return 0


NODE_KINDS = ("node", "nodes", "inode", "inferencenode", "inferencenodes")
PLAN_KINDS = ("swapplan", "swapplans", "swp", "plan")


def cmd_approve(fleet: Fleet, args: argparse.Namespace) -> int:
    """`approve PLAN`, `approve swapplan PLAN` or `approve node NODE`."""
    if len(args.target) == 1:
        return _approve_plan(fleet, args, args.target[0])
    if len(args.target) == 2 and args.target[0] in PLAN_KINDS:
        return _approve_plan(fleet, args, args.target[1])
    if len(args.target) == 2 and args.target[0] in NODE_KINDS:
        return _approve_node(fleet, args, args.target[1])
    say(
        f"kubectl mlxfleet approve: {' '.join(args.target)!r}: expected PLAN, swapplan PLAN or "
        "node NODE"
    )
    return 2


def _approve_node(fleet: Fleet, args: argparse.Namespace, name: str) -> int:
    node = fleet.node(name)
    if not approval.waiting(node):
        print(f"inferencenode/{name} is not waiting for approval")
        return 0
    try:
        labels = None if args.no_labels else approval.requested(node)
    except approval.ApprovalError as exc:
        say(f"kubectl mlxfleet approve: {exc}")
        return 1
    for line in approval.summary(node, labels or {}):
        say(line)
    fleet.custom.patch_cluster_custom_object(
        G, V, resources.INFERENCE_NODE.plural, name, approval.patch(labels)
    )
    print(f"inferencenode/{name} approved")
    return 0


def _approve_plan(fleet: Fleet, args: argparse.Namespace, name: str) -> int:
    args.plan = name
    ns = args.namespace or fleet.target.namespace
    plan = fleet.plan(args.plan, ns)
    if not plan.get("spec", {}).get("paused"):
        print(f"swapplan {ns}/{args.plan} is not waiting for approval")
        return 0
    fleet.custom.patch_namespaced_custom_object(
        G, V, ns, "swapplans", args.plan, {"spec": {"paused": False}}
    )
    print(f"swapplan {ns}/{args.plan} approved")
    return 0


def cmd_cordon(fleet: Fleet, args: argparse.Namespace) -> int:
    fleet.node(args.node)  # a clear 404 before any patch
    if args.command == "uncordon":
        fleet.patch_node(args.node, {"unschedulable": False, "drain": False})
        print(f"inferencenode/{args.node} uncordoned")
    else:
        fleet.patch_node(args.node, {"unschedulable": True})
        print(f"inferencenode/{args.node} cordoned")
    return 0


def cmd_drain(fleet: Fleet, args: argparse.Namespace) -> int:
    fleet.node(args.node)
    fleet.patch_node(args.node, {"unschedulable": True, "drain": True})
    print(f"inferencenode/{args.node} cordoned and draining")
    start = time.monotonic()
    cadence = drainreport.Cadence(every=args.report_every)
    while True:
        left = drainreport.waiting_on(fleet.namespaced("modeldeployments", None), args.node)
        elapsed = time.monotonic() - start
        if not left:
            print(f"inferencenode/{args.node} drained ({elapsed:.0f}s)")
            return 0
        if elapsed > args.timeout:
            for line in drainreport.drain_timeout(args.node, left, args.timeout):
                say(line)
            return 1
        if cadence.due(drainreport.report_key(left), elapsed):
            for line in drainreport.drain_lines(args.node, left, elapsed):
                say(line)
        time.sleep(args.poll)


def cmd_top(fleet: Fleet, args: argparse.Namespace) -> int:
    nodes = [n for n in fleet.nodes() if (n.get("spec") or {}).get("agent")]
    access = []
    for n in nodes:
        try:
            access.append(agents.access(n, fleet.core, token=False))
        except agents.AgentAccessError as exc:
            say(f"skipping {n['metadata']['name']}: {exc}")

    def scrape_all() -> list[render.Samples]:
        out: list[render.Samples] = []
        for a in access:
            try:
                out.append(agents.scrape(a))
            except agents.AgentAccessError as exc:
                say(f"skipping {exc}")
        return out

    before = scrape_all()
    time.sleep(args.interval)
    after = scrape_all()
    rows = render.top(
        before,
        after,
        seconds=args.interval,
        deployments=fleet.namespaced("modeldeployments", args.namespace),
    )
    print(render.top_lines(rows, seconds=args.interval))
    return 0


def cmd_logs(fleet: Fleet, args: argparse.Namespace) -> int:
    agent = agents.access(fleet.node(args.node), fleet.core, token=True)
    for line in agents.logs(agent, args.tail):
        print(line)
    return 0


COMMANDS: dict[str, tuple[Callable[[Fleet, argparse.Namespace], int], str]] = {
    "status": (cmd_status, "nodes with memory bars, deployments with placements, running plans"),
    "approve": (
        cmd_approve,
        "approve a SwapPlan that waits (spec.paused: true -> false), or `node NODE`: a Mac that "
        "joined itself (spec.approved: true, uncordoned, its requested labels applied)",
    ),
    "cordon": (cmd_cordon, "place no new replicas on NODE"),
    "uncordon": (cmd_cordon, "undo cordon and drain"),
    "drain": (cmd_drain, "cordon NODE and move its replicas elsewhere, make-before-break"),
    "top": (cmd_top, "tokens/s and TTFT per deployment, from the agents' metrics"),
    "logs": (cmd_logs, "the agent's recent log lines (never prompts)"),
}


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _tail(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 2000:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of lines from 1 to 2000")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    kubeconfig.add_flags(common)
    # the same flags after the command; SUPPRESS keeps a value given before it
    late = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    kubeconfig.add_flags(late)
    parser = argparse.ArgumentParser(
        prog="kubectl mlxfleet", description=__doc__.split("\n")[0], parents=[common]
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text, parents=[late])
        if name == "approve":
            p.add_argument("target", nargs="+", metavar="[swapplan|node] NAME")
            p.add_argument("--no-labels", action="store_true",
                           help="node: apply none of the labels it asked for")  # fmt: skip
        if name in ("cordon", "uncordon", "drain", "logs"):
            p.add_argument("node", metavar="NODE")
        if name == "drain":
            p.add_argument("--timeout", type=_positive, default=600.0, help="seconds (600)")
            p.add_argument("--poll", type=_positive, default=2.0, help=argparse.SUPPRESS)
            p.add_argument("--report-every", type=_positive, default=30.0, help=argparse.SUPPRESS)
        if name == "top":
            p.add_argument(
                "--interval", type=_positive, default=5.0, help="seconds between scrapes (5)"
            )
        if name == "logs":
            p.add_argument("--tail", type=_tail, default=100, metavar="N",
                           help="lines (1-2000, default 100)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        fleet = Fleet(kubeconfig.connect(args))
        handler, _ = COMMANDS[args.command]
        return handler(fleet, args)
    except kubeconfig.KubeconfigError as exc:
        say(f"kubectl mlxfleet: {exc}")
        return 2
    except agents.AgentAccessError as exc:
        say(f"kubectl mlxfleet {args.command}: {exc}")
        return 1
    except NotFound as exc:
        say(f"kubectl mlxfleet {args.command}: {exc}")
        return 1
    except ApiException as exc:
        said = _status(exc).get("message")
        answer = f"{exc.status} {exc.reason}" + (f": {said}" if said else "")
        say(f"kubectl mlxfleet {args.command}: the API server answered {answer}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
