"""The admin API (`/admin/v1/`, with `--console`) and what it and the console stand on: the API
server as the gateway or as the caller, who is calling and what they may do, the session cookie,
the fleet as the console shows it, live rates.

May import: the gateway's view, months, metrics and core; never the data path (proxy, relay,
calls, ...) or the console's pages (import contracts). Called by: console.
"""
