"""The `/v1/models` answers: the names one API key may use, in OpenAI's model-list shape.

`GET /v1/models` lists every name the key's namespaces hold (ModelRoutes and ModelDeployments'
served names, `catalog.listed`) that the key may use; `GET /v1/models/NAME` answers one, or 404
naming nothing private when the name is not there or not the key's. Each entry says its namespace
and whether it is a route or a deployment (`mlxfleet`).
May import: the standard library, core (catalog, errors, keys), mlxfleet_common.wire.openai_proxy.
Called by: proxy (after it authenticated the key).
"""

from __future__ import annotations

import json
import time
from typing import Any

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.core import catalog, errors, keys


async def answer(send: asgi.Send, path: str, *, key: keys.ApiKey, names: catalog.Catalog) -> None:
    now = int(time.time())

    def entry(found: catalog.Resolved) -> dict[str, Any]:
        kind = "route" if found.route is not None else "deployment"
        return {
            "id": found.name,
            "object": "model",
            "created": now,
            "owned_by": found.namespace,
            "mlxfleet": {"namespace": found.namespace, "kind": kind},
        }

    name = path.split("/models/", 1)[1] if "/models/" in path else None
    if name:
        found = names.resolve(key.scope, name)
        if found is None or not key.may_use(name):
            raise errors.model_not_found(name)
        await asgi.send_json(send, 200, json.dumps(entry(found)).encode())
        return
    listed = [e for e in names.listed(key.scope) if key.may_use(e.name)]
    body = {"object": "list", "data": [entry(e) for e in listed]}
    await asgi.send_json(send, 200, json.dumps(body).encode())
