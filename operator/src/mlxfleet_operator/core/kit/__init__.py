"""The kit of operator core: small pure pieces every kind and the fleet layer use.

`thermal` (heat conditions), `heartbeat` (debounce), `naming` (deterministic names), `cost`
(report arithmetic), `leadership` (the fenced election's decisions), `clocks`, then `conditions`
(kstatus bookkeeping), then `events` (Kubernetes Events as values). The kit imports nothing else
of core (a layers contract), so `core.fleet` and the kinds sit above it without a package circle.
"""
