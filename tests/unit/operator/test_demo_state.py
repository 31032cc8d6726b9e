"""What `make demo` records so a user can reach the gateway again (`.dev/demo/demo.json`)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.dev import cli, controlplane, demo


def test_demo_records_the_openai_base_url_and_a_private_key_file(tmp_path: Path) -> None:
    state: dict[str, Any] = {"pids": [1]}
    demo.record_gateway(tmp_path, state, gateway="http://127.0.0.1:8123", key="mfk-secret")
    assert state["gateway"] == "http://127.0.0.1:8123"  # unchanged: scripts read it
    assert state["gateway_openai_base_url"] == "http://127.0.0.1:8123/v1"
    key_file = Path(state["api_key_file"])
    assert key_file == (tmp_path / demo.KEY_FILE).resolve()
    assert key_file.read_text().strip() == "mfk-secret"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "mfk-secret" not in repr(state)  # the path is recorded, never the key


def test_the_environment_file_puts_the_tools_on_path_and_never_holds_the_key(
    tmp_path: Path,
) -> None:
    """After `make demo` nothing put kubectl, the plugin and helm on PATH (issue 28 item 9)."""
    demo.record_gateway(tmp_path, {"pids": []}, gateway="http://127.0.0.1:8123", key="mfk-s3cret")
    env = demo.write_env(tmp_path, dev=tmp_path.parent, gateway="http://127.0.0.1:8123")
    assert "mfk-s3cret" not in env.read_text()
    out = subprocess.run(
        ["bash", "-c", f"source {env} && echo $OPENAI_BASE_URL $OPENAI_API_KEY && command -v "
         "kubectl-mlxfleet kubectl && echo $KUBECONFIG"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines = out.stdout.split()
    assert lines[:2] == ["http://127.0.0.1:8123/v1", "mfk-s3cret"]
    assert lines[2] == str(Path(sys.executable).parent / "kubectl-mlxfleet")
    assert lines[3].endswith("kubectl")
    assert lines[4] == str(tmp_path.parent.resolve() / "kubeconfig")


def test_cluster_up_bare_installs_nothing(monkeypatch: Any, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def start(root: Path, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(controlplane, "load", lambda root: None)
    monkeypatch.setattr(controlplane, "start", start)
    monkeypatch.setattr(cli, "dev_dir", lambda: tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["cluster-up", "--bare"])
    assert seen == {"bare": True}
