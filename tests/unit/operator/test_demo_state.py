"""What `make demo` records so a user can reach the gateway again (`.dev/demo/demo.json`)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from mlxfleet_operator.dev import demo


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
