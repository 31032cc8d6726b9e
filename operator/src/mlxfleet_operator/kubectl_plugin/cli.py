"""`kubectl mlxfleet` commands (console script `kubectl-mlxfleet`).

    kubectl mlxfleet status [-n NS]           nodes with memory bars, deployments, running plans
    kubectl mlxfleet approve PLAN [-n NS]     let a SwapPlan that waits for approval run
    kubectl mlxfleet cordon|uncordon NODE     no new replicas on NODE / undo cordon and drain
    kubectl mlxfleet drain NODE [--timeout S] cordon, move its replicas (make-before-break), wait
    kubectl mlxfleet top [--interval S]       tokens/s and TTFT per deployment, from the agents
    kubectl mlxfleet logs NODE [--tail N]     the agent's recent log lines (never prompts)

`--kubeconfig`, `KUBECONFIG`, `--context` and `-n` work as in kubectl, before or after the command.
Exit codes: 0 done, 1 the cluster or an agent refused or timed out, 2 bad input.
May import: kubernetes, kubectl_plugin modules, `api.resources`. Called by: the console script.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_operator.api import resources
from mlxfleet_operator.kubectl_plugin import agents, kubeconfig, render

G, V = resources.GROUP, resources.VERSION


def _obj(found: object) -> dict[str, Any]:
    return cast(dict[str, Any], found)


def _items(found: object) -> list[dict[str, Any]]:
    return list(_obj(found)["items"])


class Fleet:
    """The three kinds, read and patched through one API client."""

    def __init__(self, target: kubeconfig.Target) -> None:
        self.target = target
        self.custom = kubernetes.client.CustomObjectsApi(target.client)
        self.core = kubernetes.client.CoreV1Api(target.client)

    def nodes(self) -> list[dict[str, Any]]:
        return _items(self.custom.list_cluster_custom_object(G, V, "inferencenodes"))

    def node(self, name: str) -> dict[str, Any]:
        return _obj(self.custom.get_cluster_custom_object(G, V, "inferencenodes", name))

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


def cmd_approve(fleet: Fleet, args: argparse.Namespace) -> int:
    ns = args.namespace or fleet.target.namespace
    plan = _obj(fleet.custom.get_namespaced_custom_object(G, V, ns, "swapplans", args.plan))
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
    last: list[str] | None = None
    while True:
        left = render.placements_on(fleet.namespaced("modeldeployments", None), args.node)
        elapsed = time.monotonic() - start
        if not left:
            print(f"inferencenode/{args.node} drained ({elapsed:.0f}s)")
            return 0
        if left != last:
            say(f"[{elapsed:4.0f}s] {len(left)} replica(s) still on {args.node}: {', '.join(left)}")
            last = left
        if elapsed > args.timeout:
            say(
                f"drain {args.node}: timed out after {args.timeout:.0f}s with {', '.join(left)} "
                "still there (no other node has room? see `kubectl mlxfleet status`); the node "
                "stays draining: replicas move as soon as room appears"
            )
            return 1
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
    "approve": (cmd_approve, "approve a SwapPlan that waits (spec.paused: true -> false)"),
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
    if not text.isdigit() or not 1 <= int(text) <= 2000:
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
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text, parents=[late])
        if name == "approve":
            p.add_argument("plan", metavar="PLAN")
        if name in ("cordon", "uncordon", "drain", "logs"):
            p.add_argument("node", metavar="NODE")
        if name == "drain":
            p.add_argument("--timeout", type=_positive, default=600.0, help="seconds (600)")
            p.add_argument("--poll", type=_positive, default=2.0, help=argparse.SUPPRESS)
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
    except ApiException as exc:
        say(f"kubectl mlxfleet {args.command}: the API server answered {exc.status} {exc.reason}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
