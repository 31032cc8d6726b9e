"""mlxfleet operator: CRD models (api), pure decisions (core), kopf glue (handlers), I/O (adapters).

May import: mlxfleet_agent.contract and mlxfleet_agent.sizing only from the agent package.
Called by: the `mlxfleet-operator` and `mlxfleet` console scripts and the tests.
"""

__version__ = "0.1.0"
