"""Hollow agents: hundreds of simulated Macs in one asyncio process, for scale tests.

Each hollow node serves the node agent's control API (`mlxfleet_agent.contract` models, bearer
token, the same routes, status codes and error bodies as the real agent's control API) on its own
loopback port, over the agent's own slots (`mlxfleet_agent.slots`: the real state machine,
convergence loop and swap protocol) whose backends are simulated, as kubemark runs the real
kubelet: Pending -> Downloading -> Loading -> Warming -> Ready with configurable timings, surge
and hold swaps with their SwapRecords, the memory budget (507 when a model does not fit),
rollback when the new model fails to load. Faults are injected per node while it runs: stop
answering (refuse connections, or accept and never answer), answer slowly, fail slot loads.

A test tool (the way Kubernetes scale tests use kubemark hollow nodes and KWOK): it never
replaces the real agent in the functional tests, and `tests/integration/hollow` checks it answers
the same requests like a real agent does. No data plane (`dataPort` is the control port).

Modules: `config` (pydantic settings of a fleet), `slots` (the simulated backends under the
real slots' seam, `slots.deps`), `node`
(admission, GET /v1/state, models), `api` (routes and error bodies), `server` (HTTP/1.1 on
asyncio sockets, the admin API), `__main__` (`python -m tests.support.hollow`).
May import: the standard library, pydantic, httptools, `mlxfleet_agent.contract`,
`mlxfleet_agent.sizing` and `mlxfleet_agent.models.modeldir` (the agent's wire contract, its
pure estimate and how it reads a model folder), `mlxfleet_agent.slots` and what its seam names.
Called by: benchmarks/scale (`make bench-scale`), tests/integration/hollow, tests/scale.
"""
