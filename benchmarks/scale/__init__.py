"""`make bench-scale`: the operator against hundreds of hollow Macs on a real control plane.

Modules: `workload` (the generated fleet and deployments, pure), `observe` (watches, API server
request counts, operator CPU/RSS, py-spy profiles), `run` (the phases: register, converge, steady
state, failover, model change), `__main__` (flags, growth runs, tables, the JSON line).
"""
