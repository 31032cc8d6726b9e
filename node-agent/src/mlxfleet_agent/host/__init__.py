"""This machine and the plumbing every folder shares: OS facts and process hooks (`platform`),
durable file writes (`files`), when the served certificate expires (`certs`). The S3 client
builder is the shared one, `mlxfleet_common.s3client`.

May import: psutil, cryptography (certs only), the standard library.
Called by: models, backends, telemetry, slots, controlapi, runtime.
"""
