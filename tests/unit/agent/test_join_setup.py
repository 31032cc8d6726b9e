"""join's local set-up, pure parts: the merge of agent.yaml, the account's commands, options.

Issue 23: a second join overwrote the admin's edits to agent.yaml; the LaunchDaemon ran as root;
join took no telemetry or Hugging Face token options.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mlxfleet_agent import service_units
from mlxfleet_agent.join import account, configmerge, options, plan

JOINED = {"nodeName": "mac-1", "bind": "0.0.0.0", "controlPort": 8470, "dataPort": 8471}


def test_first_join_writes_what_it_wants() -> None:
    merged = configmerge.merge(desired=JOINED, current=None, base=None)
    assert merged.result == JOINED
    assert merged.writes


def test_rejoin_keeps_the_admins_edits_and_applies_its_own_changes() -> None:
    current = {**JOINED, "dataPort": 9999, "logLevel": "debug"}  # the admin's two edits
    desired = {**JOINED, "controlPort": 9470, "telemetryBucket": "t"}  # join's two changes
    merged = configmerge.merge(desired=desired, current=current, base=JOINED)
    assert merged.result == {
        "nodeName": "mac-1", "bind": "0.0.0.0", "controlPort": 9470, "dataPort": 9999,
        "logLevel": "debug", "telemetryBucket": "t",
    }  # fmt: skip
    said = [c.describe() for c in merged.changes]
    assert said == [
        "changed controlPort: 8470 -> 9470",
        "kept your dataPort: 9999 (join would set 8471)",
        'added telemetryBucket: "t"',
    ]


def test_a_key_the_admin_removed_stays_removed() -> None:
    current = {k: v for k, v in JOINED.items() if k != "bind"}
    merged = configmerge.merge(desired=JOINED, current=current, base=JOINED)
    assert "bind" not in merged.result
    assert [c.describe() for c in merged.changes] == [
        'kept your bind: removed (join would set "0.0.0.0")'
    ]
    assert not merged.writes  # nothing join manages changed: the file stays as it is


def test_without_a_record_every_key_in_the_file_is_the_admins() -> None:
    current = {**JOINED, "bind": "10.0.0.5"}
    merged = configmerge.merge(desired=JOINED, current=current, base=None)
    assert merged.result["bind"] == "10.0.0.5"


def test_a_key_join_no_longer_writes_is_removed_when_untouched() -> None:
    base = {**JOINED, "old": 1}
    merged = configmerge.merge(desired=JOINED, current=base, base=base)
    assert "old" not in merged.result
    assert [c.action for c in merged.changes] == ["removed"]


def test_macos_account_is_a_hidden_role_account_with_its_own_group() -> None:
    used = account.dscl_ids("root 0\n_www 70\n_mlx 450\nnobody -2\n")
    assert used == {0, 70, 450, -2}
    free = account.free_mac_id(used | {449})
    assert free == 448
    commands = account.create_commands("_mlxfleet", mac=True, free_id=free)
    assert commands[0] == ["dseditgroup", "-o", "create", "-r", "mlxfleet agent", "-i", "448",
                           "_mlxfleet"]  # fmt: skip
    attributes = {tuple(c[4:6]) for c in commands[1:] if len(c) > 5}
    assert ("UniqueID", "448") in attributes
    assert ("PrimaryGroupID", "448") in attributes
    assert ("UserShell", "/usr/bin/false") in attributes
    assert ("IsHidden", "1") in attributes


def test_linux_account_is_a_system_account_without_a_shell() -> None:
    (cmd,) = account.create_commands("mlxfleet", mac=False)
    assert cmd[:2] == ["useradd", "--system"]
    assert "/usr/sbin/nologin" in cmd
    assert cmd[-1] == "mlxfleet"


@pytest.mark.parametrize("name", ["root", "", "1abc", "a b", "x" * 33])
def test_bad_account_names_are_refused_naming_the_flag(name: str) -> None:
    with pytest.raises(account.AccountError, match="--user"):
        account.check_name(name)


def _args(**values: str | None) -> argparse.Namespace:
    keys = ("bucket", "endpoint_url", "prefix", "region")
    return argparse.Namespace(**{f"telemetry_{k}": values.get(k) for k in keys})


def test_telemetry_options_become_the_agents_settings() -> None:
    keys = options.config_keys(_args(bucket="fleet", endpoint_url="https://r2.example"))
    assert keys == {"telemetryBucket": "fleet", "telemetryEndpointUrl": "https://r2.example"}
    with pytest.raises(plan.JoinError, match="--telemetry-endpoint-url"):
        options.config_keys(_args(endpoint_url="r2.example"))


def test_telemetry_credentials_name_only_the_s3_keys(tmp_path: Path) -> None:
    good = tmp_path / "good.env"
    good.write_text("# keys\nMLXFLEET_TELEMETRY_ACCESS_KEY_ID=AK\nexport "
                    "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY='s e'\n")  # fmt: skip
    text = options.telemetry_credentials(good)
    assert service_units.env_file(text, origin="x") == {
        "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": "AK", "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": "s e"
    }  # fmt: skip
    bad = tmp_path / "bad.env"
    bad.write_text("PATH=/tmp\n")
    with pytest.raises(plan.JoinError, match=r"--telemetry-credentials-file .*PATH"):
        options.telemetry_credentials(bad)


def test_hf_token_file_is_one_token(tmp_path: Path) -> None:
    token = tmp_path / "hf"
    token.write_text("hf_abcdefgh12345678\n")
    assert options.hf_token(token) == "hf_abcdefgh12345678\n"
    token.write_text("two\nlines and spaces\n")
    with pytest.raises(plan.JoinError, match="--hf-token-file"):
        options.hf_token(token)
    with pytest.raises(plan.JoinError, match="--hf-token-file"):
        options.hf_token(tmp_path / "missing")


def test_unit_environment_per_system() -> None:
    layout = plan.Layout("/etc/m", "/var/lib/m", "/var/lib/m/models", "/units", "/var/log/m")
    creds = "MLXFLEET_TELEMETRY_ACCESS_KEY_ID=AK\n"
    env, files = options.unit_environment(layout, hf_token_file=Path("/etc/m/hf-token"),
                                          telemetry=creds, mac=True)  # fmt: skip
    assert env == {"HF_HOME": "/var/lib/m/huggingface", "HF_TOKEN_PATH": "/etc/m/hf-token",
                   "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": "AK"}  # fmt: skip
    assert files == []
    env, files = options.unit_environment(layout, hf_token_file=None, telemetry=creds, mac=False)
    assert env == {"HF_HOME": "/var/lib/m/huggingface"}
    assert files == ["/etc/m/telemetry.env"]  # systemd reads it itself


def test_units_name_the_account_and_its_group() -> None:
    argv = ["/opt/mlxfleet/bin/mlxfleet-agent", "serve"]
    plist = service_units.launchd_plist(argv, user="_mlxfleet", group="_mlxfleet")
    assert "<key>UserName</key>\n\t<string>_mlxfleet</string>" in plist
    assert "<key>GroupName</key>\n\t<string>_mlxfleet</string>" in plist
    unit = service_units.systemd_unit(argv, user="mlxfleet", group="mlxfleet").splitlines()
    assert "User=mlxfleet" in unit
    assert "Group=mlxfleet" in unit
