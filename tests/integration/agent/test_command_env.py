"""The `command` engine's environment is an allow-list (issue 22 item 2), against a real agent.

The chain that went through the old deny-list: an allowed Python program (here the real
`mlx_lm.server` entry point) started with `PYTHONWARNINGS=ignore::antigravity.x` imports
`antigravity`, which opens `$BROWSER`; `BROWSER=/usr/bin/perlthanks` is a Perl script, and
`PERL5OPT=-Mbase;system(...)` runs code in it. A file the Perl code touches is the proof.

- the control: the same chain, started with the environment the agent gives a backend
  (`backends.process`: the agent's own environment, then the slot's), runs code on this machine;
- the agent refuses the slot (422 naming the variable and what is allowed) and no code runs;
- a slot persisted with the chain (an older agent accepted it) is not restored, the others are;
- a node narrows the list with `--allow-env`; an allowed variable still reaches the server;
- the agent's own telemetry credentials in its environment never reach a backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent.conftest import Agent, slot_spec

PERLTHANKS = shutil.which("perlthanks")
SERVER = str(Path(sys.executable).with_name("mlx_lm.server"))  # a Python program, allow-listed

pytestmark = [
    pytest.mark.mlx,
    pytest.mark.timeout(300),
    pytest.mark.skipif(PERLTHANKS is None, reason="perl (perlthanks) not installed"),
]


def _chain(marker: Path) -> dict[str, str]:
    assert PERLTHANKS is not None
    assert " " not in str(marker)  # PERL5OPT splits on spaces
    return {
        "PYTHONWARNINGS": "ignore::antigravity.x",
        "BROWSER": PERLTHANKS,
        "PERL5OPT": f'-Mbase;system("touch","{marker}");exit',
    }


def _engine(env: dict[str, str]) -> dict[str, Any]:
    argv = [SERVER, "--model", "{model}", "--host", "{host}", "--port", "{port}"]
    return {
        "name": "command",
        "command": {
            "argv": [*argv, "--log-level", "WARNING"],
            "capabilities": ["chat", "completions"],
            "memoryBytes": 1 << 30,
            "stopSignal": "SIGINT",
            "requestModel": "path",
            "env": env,
        },
    }


def _appears(path: Path, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def test_the_chain_runs_code_when_a_program_gets_it(tmp_path: Path) -> None:
    """The control: given to the allowed program the way the agent starts a backend, the three
    variables run code (so the refusals below are what stops them)."""
    marker = tmp_path / "control-ran"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **_chain(marker)}  # as backends.process
    subprocess.run([SERVER, "--help"], env=env, capture_output=True, timeout=120, check=False)
    assert _appears(marker, 15.0), "the chain did not run code here: the test below proves nothing"


def test_the_agent_refuses_the_chain_and_runs_nothing(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "agent-ran"
    agent = agent_factory(extra=["--allow-command", SERVER])
    refused = agent.put_slot("c", slot_spec(model_a, "cmd", engine=_engine(_chain(marker))))
    assert refused.status_code == 422, refused.text
    assert "env" in refused.text
    assert "allowed: CUDA_VISIBLE_DEVICES" in refused.text
    for name, value in _chain(marker).items():  # each one alone is refused too, by name
        alone = agent.put_slot("c", slot_spec(model_a, "cmd", engine=_engine({name: value})))
        assert alone.status_code == 422, alone.text
        assert repr(name) in alone.text
    assert agent.api("GET", "/v1/slots/c").status_code == 404
    # an allowed variable reaches a server that answers
    ok = agent.put_slot("ok", slot_spec(model_a, "cmd", engine=_engine({"OMP_NUM_THREADS": "1"})))
    assert ok.status_code in (200, 201, 202), ok.text
    agent.wait_ready("ok")
    answer = agent.openai(timeout=120.0).completions.create(
        model="cmd", prompt="hello", max_tokens=4
    )
    assert answer.choices[0].finish_reason is not None
    assert not _appears(marker, 3.0)
    assert agent.proc.poll() is None


def test_a_node_narrows_the_list(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    agent = agent_factory(
        extra=["--allow-command", SERVER, "--allow-env", "OMP_NUM_THREADS"],
    )
    narrowed = agent.put_slot(
        "c", slot_spec(model_a, "cmd", engine=_engine({"HF_HUB_OFFLINE": "1"}))
    )
    assert narrowed.status_code == 422, narrowed.text
    assert "'HF_HUB_OFFLINE' is not allowed (allowed: OMP_NUM_THREADS" in narrowed.text


def test_a_persisted_slot_with_the_chain_is_not_restored(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    """An agent before the allow-list accepted and saved the slot: after the upgrade it is left
    out (logged), the other slots come back, and no code runs."""
    marker = tmp_path / "restored-ran"
    state = tmp_path / "state"
    state.mkdir()
    slots = {
        "bad": slot_spec(model_a, "cmd", engine=_engine(_chain(marker))),
        "good": slot_spec(model_a, "tiny"),
    }
    (state / "slots.json").write_text(json.dumps({"slots": slots}))
    agent = agent_factory(state_dir=state, extra=["--allow-command", SERVER])
    agent.wait_ready("good")
    assert agent.api("GET", "/v1/slots/bad").status_code == 404
    assert "persisted slot no longer valid" in agent.log_path.read_text()
    assert not _appears(marker, 3.0)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc/PID/environ")
def test_the_agents_own_credentials_never_reach_a_backend(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    secret = "s3cr3t-telemetry-key"
    agent = agent_factory(
        extra=["--allow-command", SERVER],
        env={
            "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": secret,
            "AWS_SECRET_ACCESS_KEY": secret,
            "MLXFLEET_UNRELATED_SETTING": "kept",
        },
    )
    ok = agent.put_slot("env", slot_spec(model_a, "cmd", engine=_engine({"OMP_NUM_THREADS": "1"})))
    assert ok.status_code in (200, 201, 202), ok.text
    agent.wait_ready("env")
    agent_env = (Path("/proc") / str(agent.proc.pid) / "environ").read_bytes()
    assert secret.encode() in agent_env  # the control: the agent itself holds it
    (backend,) = _children(agent.proc.pid)
    env = dict(
        item.split("=", 1)
        for item in (Path("/proc") / str(backend) / "environ").read_bytes().decode().split("\0")
        if "=" in item
    )
    assert env["OMP_NUM_THREADS"] == "1"  # the slot's allowed variable
    assert env["MLXFLEET_UNRELATED_SETTING"] == "kept"  # the rest of the agent's environment
    assert secret not in "".join(env.values())
    assert not [n for n in env if n.startswith(("MLXFLEET_TELEMETRY_", "AWS_"))]
