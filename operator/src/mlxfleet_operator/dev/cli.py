"""`mlxfleet dev ...`: start and stop the local control plane and the demo.

May import: dev (controlplane, credentials, demo).
Called by: mlxfleet_operator.cli (and the Makefile).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from mlxfleet_operator.dev import controlplane, credentials, demo


def dev_dir() -> Path:
    """`.dev/` at the repository root: kubeconfigs, control-plane data, demo state."""
    return controlplane.repo_root() / ".dev"


def cluster_up(args: argparse.Namespace) -> int:
    root = dev_dir() / "control-plane"
    existing = controlplane.load(root)
    if existing is not None:
        print(f"control plane already running at {existing.server}")
        return 0
    bare = bool(getattr(args, "bare", False))
    print("starting etcd + kube-apiserver on loopback ...", file=sys.stderr)
    plane = controlplane.start(root, bare=bare)
    for src, name in (
        (plane.kubeconfig, "kubeconfig"),
        (plane.operator_kubeconfig, "operator.kubeconfig"),
        (plane.gateway_kubeconfig, "gateway.kubeconfig"),
    ):
        shutil.copy2(src, dev_dir() / name)
    print(f"control plane ready at {plane.server}")
    print(f"  admin:    export KUBECONFIG={dev_dir() / 'kubeconfig'}")
    print(f"  operator: {dev_dir() / 'operator.kubeconfig'} ({credentials.OPERATOR_USER})")
    print(f"  gateway:  {dev_dir() / 'gateway.kubeconfig'} ({credentials.GATEWAY_USER})")
    if bare:
        print(
            "  bare:     nothing installed (no CRDs, namespaces or RBAC): rehearse the Helm\n"
            "            quickstart (docs/quickstart.md): helm install mlxfleet charts/mlxfleet ..."
        )
    print("  stop:     make cluster-down")
    return 0


def cluster_down(_: argparse.Namespace) -> int:
    controlplane.stop(dev_dir() / "control-plane")
    for name in ("kubeconfig", "operator.kubeconfig", "gateway.kubeconfig"):
        (dev_dir() / name).unlink(missing_ok=True)
    print("control plane stopped and its data removed")
    return 0


def demo_up(args: argparse.Namespace) -> int:
    return demo.up(dev_dir(), keep_running=not args.no_keep)


def demo_down(_: argparse.Namespace) -> int:
    return demo.down(dev_dir())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mlxfleet dev", description=(__doc__ or "").splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("cluster-up", help="start etcd + kube-apiserver; writes .dev/kubeconfig")
    p_up.add_argument(
        "--bare",
        action="store_true",
        help="install nothing (no CRDs, namespaces, RBAC): for rehearsing `helm install`",
    )
    sub.add_parser("cluster-down", help="stop the control plane and remove its data")
    p_demo = sub.add_parser("demo", help="control plane + operator + two agents + a swap")
    p_demo.add_argument("--no-keep", action="store_true", help="tear down at the end")
    sub.add_parser("demo-down", help="stop everything the demo started")
    args = parser.parse_args(argv)
    handlers = {
        "cluster-up": cluster_up,
        "cluster-down": cluster_down,
        "demo": demo_up,
        "demo-down": demo_down,
    }
    return handlers[args.command](args)
