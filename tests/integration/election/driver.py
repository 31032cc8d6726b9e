"""A candidate process for the election tests: the operator's own election code
(`adapters.election.run`) with a stand-in for kopf that "acts" while it leads.

Acting = appending `<identity> <unix time>` to the shared ticks file every TICK seconds, each
after the same check the operator's actions use (`leader.may_act()`); every line written is an
action that had effects outside the process. Logs (with unix timestamps) go to stdout.
Exit status: 0 after SIGTERM (lease released), 75 when the lease was lost (fenced).
Run: python -m tests.integration.election.driver --kubeconfig K --identity X --ticks FILE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time

from mlxfleet_operator.adapters import election, leader

TICK = 0.02


async def act(path: str, identity: str, stop: asyncio.Event, *, block_after: float | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    started = time.monotonic()
    try:
        while not stop.is_set():
            if leader.may_act():
                os.write(fd, f"{identity} {time.time():.6f}\n".encode())
            if block_after is not None and time.monotonic() - started > block_after:
                time.sleep(4 * TICK * 100)  # noqa: ASYNC251 - a blocked event loop, on purpose
                block_after = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK)
    finally:
        os.close(fd)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--ticks", required=True)
    p.add_argument("--namespace", default="mlxfleet-system")
    p.add_argument("--lease-duration", type=int, default=3)
    p.add_argument("--renew-deadline", type=float, default=2.0)
    p.add_argument("--retry-period", type=float, default=0.5)
    p.add_argument("--block-after", type=float, default=None, help="block the loop 8 s once")
    args = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(created).6f %(name)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = leader.ElectionSettings(
        namespace=args.namespace,
        identity=args.identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    asyncio.run(
        election.run(
            settings,
            kubeconfig=args.kubeconfig,
            liveness=None,
            operate=lambda stop: act(args.ticks, args.identity, stop, block_after=args.block_after),
        )
    )
    print(f"{time.time():.6f} driver exited", flush=True)


if __name__ == "__main__":
    main()
