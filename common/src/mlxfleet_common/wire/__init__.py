"""What the agent's data plane and the gateway share on the wire: the HTTP client, stream
forwarding, connection limits, health checks, request-body checks, the OpenAI endpoint table and
the header names. Imports the standard library, httptools/uvicorn and httpx; no program's code.
"""
