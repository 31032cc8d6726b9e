"""Tests of the CRDs, samples and RBAC against the real API server."""
