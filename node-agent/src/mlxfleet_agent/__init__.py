"""mlxfleet node agent: runs mlx-lm backends on one Mac behind a control API and a data plane.

May import: nothing from mlxfleet_operator. Called by: the `mlxfleet-agent` console script.
"""

__version__ = "0.1.0"
