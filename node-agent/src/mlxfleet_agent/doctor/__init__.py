"""The macOS doctor: what takes a headless Mac down (sleep, no restart after a power failure,
FileVault at the unlock screen after a reboot, an OS update that restarts it, a missing
Thunderbolt Bridge), read from the host at a slow interval off the event loop and reported in
GET /v1/state (`contract.DoctorReport`); the operator turns it into InferenceNode conditions.

`parse` (pure: what each command prints), `probe` (runs the commands, or reads recorded outputs),
`watch` (the thread that keeps the latest report).
May import: the standard library, contract, host. Called by: controlapi.state, runtime.compose.
"""
