"""Telemetry: what the agent served, counted (`recorder`), as Prometheus metrics (`metrics`) and
as 60 s intervals (`intervals`) that the `shipper` writes to a disk queue (`spool`) and uploads
to an S3-compatible bucket; host readings (`hoststats`). Counts and timings only, never text.

May import: contract, host, prometheus_client, psutil, the standard library. Called by:
dataplane, slots, controlapi, runtime.
"""
