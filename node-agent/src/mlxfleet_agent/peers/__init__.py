"""Weights Mac to Mac: agents serve the models they hold to each other, and fetch a model from
peers before the origin (every file verified against the origin's sizes and hashes).

`ranges` parses HTTP Range headers (pure), `checks` verifies file contents against what the
origin says (MD5 / multipart ETag, sha256, git blob sha1), `server` is the authenticated file
server mounted on the control port, `fetch` is the multi-peer downloader (blocking, worker
threads), `transfers` tracks bytes done/total and rate for the agent's state.
May import: the standard library, contract, starlette types. Called by: the model store
(fetch), the composition root (server), the control API state (transfers).
"""
