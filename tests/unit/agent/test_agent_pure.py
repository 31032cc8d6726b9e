"""Pure pieces of the agent runtime: swap strategy, restart backoff, backend command line,
service definitions, settings merging, routing errors and the persisted state file."""

from __future__ import annotations

import json
import plistlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_agent import contract, service_units
from mlxfleet_agent.backends import ranks, readiness
from mlxfleet_agent.dataplane import errors, routing
from mlxfleet_agent.engines import mlxlm
from mlxfleet_agent.host import files
from mlxfleet_agent.join import files as join_files
from mlxfleet_agent.runtime import settings
from mlxfleet_agent.slots import statefile, swap

S = contract.SwapStrategy
GIB = 1024**3


@pytest.mark.parametrize(
    ("requested", "others", "old", "new", "budget", "expected"),
    [
        pytest.param(S.AUTO, 0, 4 * GIB, 4 * GIB, 10 * GIB, S.SURGE, id="auto-both-fit"),
        pytest.param(S.AUTO, 0, 6 * GIB, 6 * GIB, 10 * GIB, S.HOLD, id="auto-too-big"),
        pytest.param(S.AUTO, 3 * GIB, 4 * GIB, 4 * GIB, 10 * GIB, S.HOLD, id="auto-others-count"),
        pytest.param(S.AUTO, 0, 5 * GIB, 5 * GIB, 10 * GIB, S.SURGE, id="auto-exact-fit"),
        pytest.param(S.SURGE, 0, 9 * GIB, 9 * GIB, 10 * GIB, S.SURGE, id="surge-is-obeyed"),
        pytest.param(S.HOLD, 0, 1, 1, 10 * GIB, S.HOLD, id="hold-is-obeyed"),
    ],
)
def test_choose_strategy(
    requested: contract.SwapStrategy, others: int, old: int, new: int, budget: int, expected: Any
) -> None:
    assert swap.choose(requested, others=others, old=old, new=new, budget=budget) is expected


@given(
    others=st.integers(0, 10**12),
    old=st.integers(1, 10**12),
    new=st.integers(1, 10**12),
    budget=st.integers(0, 3 * 10**12),
)
def test_auto_surges_exactly_when_both_fit(others: int, old: int, new: int, budget: int) -> None:
    chosen = swap.choose(S.AUTO, others=others, old=old, new=new, budget=budget)
    assert (chosen is S.SURGE) == (others + old + new <= budget)
    assert chosen in (S.SURGE, S.HOLD)


def test_backoff_doubles_and_caps() -> None:
    delays = [readiness.next_backoff(n, max_s=30.0) for n in range(10)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert max(delays) == 30.0
    assert delays == sorted(delays)


def _launch(**options: Any) -> mlxlm.LaunchSpec:
    return mlxlm.LaunchSpec(
        model_dir=Path("/m/tiny"),
        options=contract.ServerOptions(**options),
        max_concurrency=4,
        python="/usr/bin/python3",
    )


def test_backend_command_defaults_follow_the_slot_concurrency() -> None:
    argv = mlxlm.command(_launch(), port=5000)
    assert argv[:4] == ["/usr/bin/python3", "-c", mlxlm.ENTRY, "server"]
    assert mlxlm.is_backend(" ".join(argv))  # the orphan sweep still recognises it
    joined = " ".join(argv)
    assert "--model /m/tiny --host 127.0.0.1 --port 5000" in joined
    assert "--decode-concurrency 4 --prompt-concurrency 4" in joined
    assert "--kv-bits" not in joined
    assert "--max-tokens" not in joined


def test_backend_command_passes_server_options() -> None:
    argv = mlxlm.command(
        _launch(
            decode_concurrency=16,
            prompt_concurrency=2,
            max_tokens=99,
            kv_bits=8,
            chat_template_args={"enable_thinking": False},
        ),
        port=1,
    )
    pairs = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert pairs["--decode-concurrency"] == "16"
    assert pairs["--prompt-concurrency"] == "2"
    assert pairs["--max-tokens"] == "99"
    assert pairs["--kv-bits"] == "8"
    assert json.loads(pairs["--chat-template-args"]) == {"enable_thinking": False}


def test_launchd_plist_keeps_the_agent_alive() -> None:
    text = service_units.launchd_plist(
        ["/usr/local/bin/mlxfleet-agent", "serve", "--config", "/etc/a.yaml"], user="mlx"
    )
    plist = plistlib.loads(text.encode())
    assert plist["Label"] == service_units.LABEL
    assert plist["KeepAlive"] is True
    assert plist["RunAtLoad"] is True
    assert plist["ProgramArguments"][1:] == ["serve", "--config", "/etc/a.yaml"]
    assert plist["StandardOutPath"].endswith(".log")
    assert plist["UserName"] == "mlx"


def test_systemd_unit_restarts_and_quotes_arguments() -> None:
    text = service_units.systemd_unit(
        ["/opt/bin/mlxfleet-agent", "serve", "--state-dir", "/var/a b"]
    )
    assert "ExecStart=/opt/bin/mlxfleet-agent serve --state-dir '/var/a b'" in text
    assert "Restart=always" in text
    assert "KillSignal=SIGTERM" in text


def test_settings_flags_override_file_and_accept_both_spellings(tmp_path: Path) -> None:
    file_values = {
        "stateDir": str(tmp_path / "s"),
        "models_dir": str(tmp_path / "m"),
        "dataPort": 1,
    }
    cfg = settings.build(
        file_values=file_values, flag_values={"data_port": 2, "bind": None, "allowed_roots": None}
    )
    assert cfg.data_port == 2
    assert cfg.bind == "127.0.0.1"
    assert cfg.models_dir == tmp_path / "m"
    assert cfg.roots() == [(tmp_path / "m").resolve()]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        pytest.param({"stateDir": "/s"}, "modelsDir", id="missing-models-dir"),
        pytest.param(
            {"stateDir": "/s", "modelsDir": "/m", "colour": 1}, "colour", id="unknown-key"
        ),
        pytest.param(
            {"stateDir": "/s", "modelsDir": "/m", "tlsCert": "/c"}, "tls", id="half-tls-pair"
        ),
        pytest.param(
            {"stateDir": "/s", "modelsDir": "/m", "dataPort": 70000}, "dataPort", id="port"
        ),
    ],
)
def test_settings_errors_name_the_key(values: dict[str, Any], needle: str) -> None:
    with pytest.raises(settings.SettingsError, match=needle):
        settings.build(file_values=values, flag_values={})


def test_config_file_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("stateDir: /s\nmodels_dir: /m\nmemoryBudget: 1024\n")
    (tmp_path / "a.json").write_text('{"stateDir": "/s", "modelsDir": "/m"}')
    (tmp_path / "bad.yaml").write_text("- a list\n")
    assert settings.read_config_file(tmp_path / "a.yaml")["memoryBudget"] == 1024
    assert settings.read_config_file(tmp_path / "a.json")["modelsDir"] == "/m"
    with pytest.raises(settings.SettingsError, match="mapping"):
        settings.read_config_file(tmp_path / "bad.yaml")


def test_token_is_created_private_once(tmp_path: Path) -> None:
    cfg = settings.Settings(state_dir=tmp_path, models_dir=tmp_path / "m")
    token = cfg.read_token()
    assert len(token) >= 32
    assert cfg.read_token() == token
    assert (tmp_path / "token").stat().st_mode & 0o077 == 0


def test_token_file_is_never_readable_by_others_not_even_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created 0600 in one step: with every later chmod disabled the file is still private."""
    import os

    monkeypatch.setattr(Path, "chmod", lambda *a, **k: None)
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)
    old = os.umask(0o022)
    try:
        token = settings.Settings(state_dir=tmp_path, models_dir=tmp_path / "m").read_token()
    finally:
        os.umask(old)
    assert len(token) >= 32
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        pytest.param(b"{nope", 400, "invalid_json", id="bad-json"),
        pytest.param(b"[]", 400, "invalid_json", id="array"),
        pytest.param(b"\xff\xfe", 400, "invalid_json", id="not-utf8"),
    ],
)
def test_router_parse_errors_are_openai_shaped(raw: bytes, status: int, code: str) -> None:
    with pytest.raises(errors.RouteError) as caught:
        routing.parse(raw)
    assert caught.value.status == status
    body = json.loads(caught.value.body())
    assert body["error"]["code"] == code
    assert set(body["error"]) == {"message", "type", "param", "code"}


def _spec(**extra: Any) -> contract.SlotSpec:
    return contract.SlotSpec.model_validate({"source": "file:///m/a", "servedName": "a", **extra})


@pytest.mark.parametrize(
    ("change", "same"),
    [
        pytest.param({"servedName": "b"}, True, id="served-name-only"),
        pytest.param({"swap": {"strategy": "hold"}}, True, id="swap-policy-only"),
        pytest.param({"memoryBytes": 5}, True, id="memory-override-only"),
        pytest.param({"source": "file:///m/b"}, False, id="new-weights"),
        pytest.param({"revision": "v2"}, False, id="new-revision"),
        pytest.param({"server": {"maxTokens": 5}}, False, id="server-option"),
        pytest.param({"maxConcurrency": 9}, False, id="concurrency"),
    ],
)
def test_which_changes_need_a_new_backend(change: dict[str, Any], same: bool) -> None:
    assert swap.same_runtime(_spec(), _spec(**change)) is same


def _rank(group: str, **extra: Any) -> contract.SlotSpec:
    hosts = ["127.0.0.1:20000", "127.0.0.1:20001"]
    shard = {"group": group, "rank": 1, "worldSize": 2, "hosts": hosts}
    return _spec(shard=shard, **extra)


@pytest.mark.parametrize(
    ("before", "after", "swapped"),
    [
        pytest.param(_rank("g0-1"), _rank("g0-2", source="file:///m/b"), True, id="new-model"),
        pytest.param(_rank("g0-1"), _rank("g0-2", revision="v2"), True, id="new-revision"),
        pytest.param(_rank("g0-1"), _rank("g0-2"), False, id="re-formed-on-same-model"),
        pytest.param(_spec(), _rank("g0-1", source="file:///m/b"), False, id="becomes-a-rank"),
        pytest.param(_rank("g0-1"), _spec(source="file:///m/b"), False, id="no-longer-a-rank"),
    ],
)
def test_a_rank_swaps_only_when_its_model_changes(
    before: contract.SlotSpec, after: contract.SlotSpec, swapped: bool
) -> None:
    """A SwapPlan's new formation on another model swaps the rank (surge or hold); a group
    re-formed on the same model restarts it."""
    assert swap.rank_swap(before, after) is swapped


def test_auto_means_hold_for_a_rank_its_group_decides() -> None:
    both_fit = {"others": 0, "old": 1, "new": 1, "budget": 10 * GIB}
    assert swap.choose(S.AUTO, rank=True, **both_fit) is S.HOLD
    assert swap.choose(S.SURGE, rank=True, **both_fit) is S.SURGE


def test_state_round_trip_and_corrupt_file_is_moved_aside(tmp_path: Path) -> None:
    specs = {"a": _spec(), "b": _spec(servedName="b", server={"kvBits": 4})}
    statefile.save(tmp_path, specs)
    assert statefile.load(tmp_path) == specs
    assert not list(tmp_path.glob(".*.tmp"))
    (tmp_path / statefile.SLOTS_FILE).write_text('{"slots": {"a": {"source": "ftp://x"')
    assert statefile.load(tmp_path) == {}
    assert (tmp_path / "slots.corrupt").exists()
    assert statefile.load(tmp_path) == {}


def test_a_slot_that_no_longer_validates_is_left_out_the_others_come_back(
    tmp_path: Path,
) -> None:
    """An older agent saved a slot the allow-lists now refuse (or any spec that no longer
    validates): that one is left out, not the whole file."""
    statefile.save(tmp_path, {"b": _spec(servedName="b")})
    raw = json.loads((tmp_path / statefile.SLOTS_FILE).read_text())
    raw["slots"]["a"] = {"source": "ftp://x"}
    raw["slots"]["c"] = {
        **raw["slots"]["b"],
        "servedName": "c",
        "engine": {
            "name": "command",
            "command": {
                "argv": ["srv", "{host}", "{port}"],
                "capabilities": ["chat"],
                "memoryBytes": 1,
                "env": {"PYTHONWARNINGS": "ignore::antigravity.x"},
            },
        },
    }
    (tmp_path / statefile.SLOTS_FILE).write_text(json.dumps(raw))
    assert list(statefile.load(tmp_path)) == ["b"]
    assert not (tmp_path / "slots.corrupt").exists()


def test_write_atomic_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    files.write_atomic(target, b"one")
    files.write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_write_atomic_gives_the_file_its_mode_private_by_default(tmp_path: Path) -> None:
    files.write_atomic(tmp_path / "state.json", b"{}")
    files.write_atomic(tmp_path / "agent.yaml", b"a: 1\n", mode=0o644)
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "agent.yaml").stat().st_mode & 0o777 == 0o644


def test_join_writes_through_the_one_atomic_writer(tmp_path: Path) -> None:
    """join's `Writer` (issue 27: it had an atomic writer of its own): the mode it is given, the
    content only when it changes, nothing in a dry run, no temporary file left."""
    said: list[str] = []
    target = tmp_path / "etc" / "agent.yaml"
    assert join_files.Writer(dry_run=True, say=said.append).write(target, "a: 1\n")
    assert said == [f"would write {target}"]
    assert not target.parent.exists()
    writer = join_files.Writer(dry_run=False, say=said.append)
    assert writer.write(target, "a: 1\n", mode=0o640)
    assert target.read_text() == "a: 1\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert not writer.write(target, "a: 1\n", mode=0o600)  # same content: only the mode
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["agent.yaml"]


def test_shipped_service_examples_are_current() -> None:
    root = Path(__file__).resolve().parents[3] / "manifests" / "agent"
    argv = ["/opt/mlxfleet/bin/mlxfleet-agent", "serve", "--config", "/etc/mlxfleet/agent.yaml"]
    env = service_units.env_file((root / "agent.env.example").read_text(), origin="example")
    assert (root / "io.mlxfleet.agent.plist").read_text() == service_units.launchd_plist(
        argv, user="_mlxfleet", environment=env
    )
    assert (root / "mlxfleet-agent.service").read_text() == service_units.systemd_unit(
        argv, user="mlxfleet", environment_files=["/etc/mlxfleet/agent.env"]
    )
    values = settings.read_config_file(root / "agent.yaml")
    assert settings.build(file_values=values, flag_values={}).data_port == 8471


def _rank_spec(rank: int, hosts: list[str]) -> contract.RankSpec:
    return contract.RankSpec(group="g0-1", rank=rank, world_size=len(hosts), hosts=hosts)


def test_a_rank_runs_only_on_the_agents_fabric_address() -> None:
    hosts = ["10.10.0.1:20001", "10.10.0.2:20017"]
    assert ranks.check_address(_rank_spec(1, hosts), "10.10.0.2") is None
    why = ranks.check_address(_rank_spec(0, hosts), "10.10.0.2")
    assert why is not None
    assert "shard.hosts[0] 10.10.0.1:20001 is not on this agent's fabric address" in why
    assert "no fabric address" in (ranks.check_address(_rank_spec(1, hosts), None) or "")
    assert ranks.own_address(_rank_spec(1, hosts)) == ("10.10.0.2", 20017)
