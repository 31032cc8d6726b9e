"""Backends: the engine processes that serve a slot's model on a loopback port.

`process` supervises one process (spawn, watch, stop), `readiness` says when it serves (warm-up,
restart backoff), `launcher` is what the slots use, `ranks` one rank of a sharded group,
`orphans` stops what a crashed agent left running. What each engine runs (argv, environment,
probes, stop signal) is the engine's own (`engines.registry` and one module per engine).
May import: contract, host, engines, httpx, psutil, the standard library. Called by: slots, runtime.
"""
