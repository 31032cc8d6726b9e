"""Slots: each one converges a desired `SlotSpec` to a warm backend and leases it to requests.

- `lease`: the narrow protocols the data plane is written against (routes, leases, refusals);
- `deps`: what every slot shares and asks of its owner (the registry);
- `handle`, `handles`, `gate`, `slot`: a slot's backends, its queue, its state and its public
  operations;
- `swap`: the zero-drop swap protocol (surge, hold, rollback) over those operations;
- `convergence`: the loop that applies desired specs one at a time;
- `registry`: every slot of the agent, admission (PUT /v1/slots), routing, persistence
  (`statefile`).
May import: contract, sizing, refusals, host, backends, models, telemetry, the standard library.
Called by: runtime, controlapi; the data plane through `slots.lease` only.
"""
