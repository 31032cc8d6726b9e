"""Telemetry parts the agent and the gateway share: `shipper` (the one telemetry shipper: a
bounded queue on disk or in memory, uploaded oldest first to idempotent keys)."""
