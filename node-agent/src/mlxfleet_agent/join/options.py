"""join's options beyond registration: the service account, telemetry, the Hugging Face token,
the dry run. Each becomes agent.yaml keys, a file join keeps in --config-dir, or variables of
the service unit; the flags are declared here so join's own flags stay where they were.

Telemetry: --telemetry-bucket/-endpoint-url/-prefix/-region go to agent.yaml (the agent's
settings of the same names); --telemetry-credentials-file is a KEY=VALUE file with the S3 keys
(MLXFLEET_TELEMETRY_ACCESS_KEY_ID and _SECRET_ACCESS_KEY, or AWS_*), copied to
<config-dir>/telemetry.env (root's, 0600): systemd reads it at each start; launchd has no such
file, so its values go into the plist (then 0600). Hugging Face: --hf-token-file is copied to
<config-dir>/hf-token (the agent's account's, 0600) and the unit sets HF_TOKEN_PATH to it; HF_HOME
is <state-dir>/huggingface, which the account owns. A later join without these flags keeps the
files an earlier one wrote.
May import: the standard library, `service_units`, join.plan. Called by: join.command.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mlxfleet_agent import service_units
from mlxfleet_agent.join import plan

TELEMETRY_KEYS = ("bucket", "endpoint-url", "prefix", "region")
CREDENTIAL_NAMES = frozenset({
    "MLXFLEET_TELEMETRY_ACCESS_KEY_ID", "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
})  # fmt: skip
_HF_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{8,256}$")


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", help="account the agent runs as (default _mlxfleet on macOS, "
                   "mlxfleet on Linux; created when missing)")  # fmt: skip
    p.add_argument("--no-create-user", dest="create_user", action="store_false",
                   help="fail instead of creating a missing --user")  # fmt: skip
    for key in TELEMETRY_KEYS:
        p.add_argument(f"--telemetry-{key}", help=f"telemetry S3 {key.replace('-', ' ')}")
    p.add_argument("--telemetry-credentials-file", type=Path, metavar="PATH",
                   help="KEY=VALUE lines: MLXFLEET_TELEMETRY_ACCESS_KEY_ID and "
                   "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY (or AWS_*)")  # fmt: skip
    p.add_argument("--hf-token-file", type=Path, metavar="PATH",
                   help="a Hugging Face token for hf:// sources (gated models)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true",
                   help="say what join would create, write and change; write nothing")  # fmt: skip
    p.add_argument("--os", choices=("macos", "linux"),
                   help="set up for this system (default: the running one)")  # fmt: skip


def config_keys(args: argparse.Namespace) -> dict[str, str]:
    """agent.yaml keys of the telemetry flags given (camelCase, as the agent reads them)."""
    out: dict[str, str] = {}
    for key in TELEMETRY_KEYS:
        value = getattr(args, f"telemetry_{key.replace('-', '_')}")
        if value is None:
            continue
        if key == "endpoint-url" and not value.startswith(("https://", "http://")):
            raise plan.JoinError(f"--telemetry-endpoint-url {value!r}: an http(s):// URL")
        if not value.strip() or "\n" in value:
            raise plan.JoinError(f"--telemetry-{key}: a non-empty one-line value")
        words = key.split("-")
        out["telemetry" + "".join(w.capitalize() for w in words)] = value.strip()
    return out


def telemetry_credentials(path: Path) -> str:
    """The credentials file's text, checked: KEY=VALUE lines naming only the S3 keys."""
    flag = "--telemetry-credentials-file"
    try:
        text = path.read_text()
    except OSError as exc:
        raise plan.JoinError(f"{flag} {path}: {exc.strerror or exc}") from None
    try:
        values = service_units.env_file(text, origin=f"{flag} {path}")
    except service_units.UnitError as exc:
        raise plan.JoinError(str(exc)) from None
    unknown = sorted(set(values) - CREDENTIAL_NAMES)
    if unknown or not values:
        raise plan.JoinError(
            f"{flag} {path}: expected {', '.join(sorted(CREDENTIAL_NAMES))}; "
            f"found {', '.join(unknown) or 'nothing'}"
        )
    return "".join(f"{k}={v}\n" for k, v in values.items())


def hf_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise plan.JoinError(f"--hf-token-file {path}: {exc.strerror or exc}") from None
    if _HF_TOKEN.fullmatch(token) is None:
        raise plan.JoinError(
            f"--hf-token-file {path}: expected one token (letters, digits, '_' and '-', "
            "such as hf_...) on one line"
        )
    return token + "\n"


def unit_environment(
    layout: plan.Layout, *, hf_token_file: Path | None, telemetry: str | None, mac: bool
) -> tuple[dict[str, str], list[str]]:
    """(variables, environment files) of the service unit."""
    env = {"HF_HOME": f"{layout.state_dir}/huggingface"}
    if hf_token_file is not None:
        env["HF_TOKEN_PATH"] = str(hf_token_file)
    files: list[str] = []
    if telemetry is not None:
        if mac:
            env |= service_units.env_file(telemetry, origin="telemetry.env")
        else:
            files.append(f"{layout.config_dir}/telemetry.env")
    return env, files
