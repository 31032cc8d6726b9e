"""The console (`/console/`, with `--console`): server-rendered pages, one script and one style
sheet of its own, mounted by the proxy with the admin API for the paths it does not serve.

May import: admin, jinja2, the gateway's view, months, metrics and core; never the data path.
Called by: server (`console.app.build`).
"""
