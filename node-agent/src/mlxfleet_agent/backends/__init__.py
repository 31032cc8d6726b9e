"""Backends: the engine processes that serve a slot's model on a loopback port.

`process` supervises one process (spawn, watch, stop), `readiness` says when it serves (warm-up,
restart backoff), `mlxlm` holds everything mlx-lm specific (command, warm-up, stop signal),
`launcher` is what the slots use, `orphans` stops what a crashed agent left running.
May import: contract, host, httpx, psutil, the standard library. Called by: slots, runtime.
"""
