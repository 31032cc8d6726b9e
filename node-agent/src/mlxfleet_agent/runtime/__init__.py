"""Running the agent: its settings (each declared once: flag, file key, environment variable),
the composition root that builds and wires every part (`compose`), `serve` with its ordered
shutdown and the connection limits of both ports, and the JSON logs.

May import: every agent folder. Called by: cli.
"""
