"""The engine as a process: ready means serving, it stops on SIGTERM and SIGINT, and a model it
cannot serve makes it exit with a reason instead of listening."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.engines.conftest import Engine, wait_ready

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_first_health_answer_means_serving_and_a_signal_stops_it(
    start_engine: Callable[..., Engine], embedding_model: Path, sig: signal.Signals
) -> None:
    engine = wait_ready(start_engine(embedding_model, "lifecycle", wait=False))
    # no warm-up grace: the first /health 200 already serves real requests
    assert engine.post("/v1/embeddings", {"input": "river"}).status_code == 200
    took = engine.stop(sig, timeout_s=20.0)
    assert engine.proc.returncode == 0, engine.log_tail()
    assert took < 15.0


def test_a_model_that_does_not_say_its_task_is_refused_with_a_reason(
    start_engine: Callable[..., Engine], reranker_model: Path, tmp_path: Path
) -> None:
    unmarked = tmp_path / "unmarked"
    shutil.copytree(reranker_model, unmarked)
    config = json.loads((unmarked / "config.json").read_text())
    del config["mlxfleet_devmodel"]
    (unmarked / "config.json").write_text(json.dumps(config))
    engine = start_engine(unmarked, "unmarked", wait=False)
    assert engine.proc.wait(timeout=120) == 2
    assert "--task embed or --task rerank" in engine.log_tail()
    # told what it is, the same directory serves
    served = start_engine(unmarked, "told", "--task=rerank")
    assert served.post("/v1/rerank", {"query": "a", "documents": ["a"]}).status_code == 200
    served.stop()


def test_a_missing_model_directory_exits_2(
    start_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = start_engine(tmp_path / "nothing", "nothing", wait=False)
    assert engine.proc.wait(timeout=120) == 2
    assert "has no config.json" in engine.log_tail()
