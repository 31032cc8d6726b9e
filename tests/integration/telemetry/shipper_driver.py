"""A stand-in agent process for the outage test: real Telemetry + Shipper, synthetic requests.

Feeds one request record (3 prompt + 2 completion tokens) every 20 ms until SIGTERM, then stops
the shipper like the agent's lifespan does. With `--final` it first waits for the open interval
to close, so everything fed is in closed intervals. Writes how many requests it fed to
`--fed-file`. No request text exists anywhere: records are counts and timings only.
Run: python -m tests.integration.telemetry.shipper_driver --spool DIR --endpoint URL ...
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
import time
from pathlib import Path

from mlxfleet_agent.runtime import settings
from mlxfleet_agent.telemetry import recorder, shipper


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spool", type=Path, required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", default="fleet")
    p.add_argument("--node", default="mac-test")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--fed-file", type=Path, required=True)
    p.add_argument("--final", action="store_true")
    args = p.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    env = settings.build(  # the keys and region from MLXFLEET_TELEMETRY_*, as the agent reads them
        file_values={"stateDir": str(args.spool), "modelsDir": str(args.spool)}, flag_values={}
    )
    secret = env.telemetry_secret_access_key
    cfg = shipper.ShipperConfig(
        spool_dir=args.spool,
        bucket=args.bucket,
        prefix=args.prefix,
        endpoint_url=args.endpoint,
        region=env.telemetry_region,
        access_key_id=env.telemetry_access_key_id,
        secret_access_key=secret.get_secret_value() if secret is not None else None,
        interval_seconds=args.interval,
        tick_seconds=0.1,
    )
    tel = recorder.Telemetry(node=args.node, interval_seconds=args.interval)
    ship = shipper.Shipper(tel, cfg)
    ship.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    fed = 0
    while not stop.is_set():
        tel.request_started("chat")
        tel.request_finished(
            recorder.RequestRecord(
                slot="chat",
                served_name="tiny",
                source="file:///m",
                endpoint="chat.completions",
                stream=False,
                prompt_tokens=3,
                completion_tokens=2,
                queue_wait_s=0.0,
                ttft_s=0.001,
                e2e_s=0.001,
            )
        )
        fed += 1
        time.sleep(0.02)
    args.fed_file.write_text(str(fed))
    if args.final:
        boundary = math.floor(time.time() / args.interval) * args.interval + args.interval
        time.sleep(max(0.0, boundary - time.time()) + 0.3)
    ship.stop()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
