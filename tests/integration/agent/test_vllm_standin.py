"""The `vllm` engine's command line and readiness against a STAND-IN OpenAI-compatible server.

NOT real vLLM: this machine has no GPU and no vllm. A `vllm` script on PATH parses `vllm serve`
the way the engine calls it, records its argv and environment, and answers `/v1/models` and
completions like vLLM's OpenAI server; a `nvidia-smi` script reports one GPU so discovery lists
the engine. What this proves: discovery, the launch (argv, offline environment), the two-step
readiness (`/v1/models`, then a real request), routing through the data plane with the served
name as `model`, and a SIGTERM stop.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.timeout(300)]

STAND_IN = r"""#!PYTHON
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
assert args[0] == "serve", args
model = args[1]
def flag(name):
    return args[args.index(name) + 1]
host, port, name = flag("--host"), int(flag("--port")), flag("--served-model-name")
record = os.environ["STANDIN_RECORD"]
with open(record, "w") as out:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in
               ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS")}}, out)

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "no route"}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body.get("model") != name:
            self.reply(404, {"error": {"message": "model %s not found" % body.get("model")}})
            return
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        if self.path == "/v1/completions":
            self.reply(200, {"id": "c", "object": "text_completion", "model": name,
                             "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                             "usage": usage})
        elif self.path == "/v1/chat/completions" and body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for ev in ({"id": "s", "object": "chat.completion.chunk", "created": 1, "model": name,
                        "choices": [{"index": 0, "finish_reason": None,
                                     "delta": {"role": "assistant", "content": "standin"}}]},
                       {"id": "s", "object": "chat.completion.chunk", "created": 1, "model": name,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                       {"id": "s", "object": "chat.completion.chunk", "created": 1, "model": name,
                        "choices": [], "usage": usage}):
                self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            self.reply(400, {"error": {"message": "unsupported"}})

server = ThreadingHTTPServer((host, port), H)
def stop(*_):
    with open(record + ".stopped", "w") as out:
        out.write("SIGTERM")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
server.serve_forever()
"""

NVIDIA_SMI = "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\n"


def _script(path: Path, text: str) -> None:
    path.write_text(text.replace("#!PYTHON", "#!" + sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_vllm_engine_against_a_stand_in_server(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "vllm", STAND_IN)
    _script(bindir / "nvidia-smi", NVIDIA_SMI)
    record = tmp_path / "standin.json"
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "STANDIN_RECORD": str(record)}
    agent = agent_factory(env=env)
    engines = {e["name"]: e for e in agent.state()["engines"]}
    assert engines["vllm"]["available"], engines["vllm"]
    assert "NVIDIA H100" in engines["vllm"]["reason"]

    options = {"maxModelLen": 4096, "gpuMemoryUtilization": 0.5, "extraArgs": ["--seed", "7"]}
    spec = slot_spec(model_a, "big", engine={"name": "vllm", "vllm": options})
    assert agent.put_slot("v", spec).status_code in (200, 201, 202)
    status = agent.wait_ready("v", timeout_s=60)

    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[0] == "serve"
    assert Path(argv[1]).resolve() == model_a.resolve()
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(status["backendPort"])
    assert argv[argv.index("--served-model-name") + 1] == "big"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.5"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert argv[-2:] == ["--seed", "7"]
    assert seen["env"] == {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }

    client = agent.openai(timeout=30.0)
    answer = client.chat.completions.create(
        model="big", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert answer.choices[0].message.content == "standin"
    assert answer.model == "big"

    assert agent.api("DELETE", "/v1/slots/v").status_code in (200, 202)
    deadline = time.monotonic() + 30
    stopped = Path(str(record) + ".stopped")
    # the stand-in creates the file, then writes the signal's name: wait for the name, not the file
    while time.monotonic() < deadline and not (stopped.exists() and stopped.read_text()):
        time.sleep(0.1)
    assert stopped.read_text() == "SIGTERM"
