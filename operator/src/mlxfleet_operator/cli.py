"""`mlxfleet`: the admin/dev command line. Dispatches to the module that owns each subcommand.

May import: any operator module (lazily, so `--help` stays fast). Called by: the console script.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mlxfleet_operator import __version__

# subcommand -> (module with `main(argv: list[str]) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crds": ("mlxfleet_operator.api.crdgen", "generate (or --check) the CRD YAML in crds/"),
    "dev": (
        "mlxfleet_operator.dev.cli",
        "local control plane and demo (cluster-up, demo, ...)",
    ),
    "token": (
        "mlxfleet_operator.bootstrap.cli",
        "bootstrap tokens for `mlxfleet-agent join` (create, list, delete)",
    ),
    "report": (
        "mlxfleet_operator.reports.cli",
        "weekly cost diff and monthly executive PDF",
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="mlxfleet",
        description="mlxfleet admin and developer commands.",
        epilog="Run `mlxfleet <command> --help` for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument(
        "command",
        choices=sorted(SUBCOMMANDS),
        help="; ".join(f"{name}: {text}" for name, (_, text) in sorted(SUBCOMMANDS.items())),
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ns = parser.parse_args(args[:1] if args and not args[0].startswith("-") else args)
    module = importlib.import_module(SUBCOMMANDS[ns.command][0])
    rc: int = module.main(args[1:])
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
