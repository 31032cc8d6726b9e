"""The desired state on disk: every slot's spec, in `<state-dir>/slots.json`.

Written atomically (`host.files`: temp file, fsync, rename, fsync the directory), so a SIGKILL
at any moment leaves either the old or the new file. An unreadable file is moved aside
(`slots.corrupt`) and logged, never fatal: the agent starts with no slots. One slot that no
longer validates (a spec an older agent accepted, such as a `command` environment variable now
outside the allow-list) is logged and left out; the others come back.
May import: the standard library, pydantic, contract, host.files. Called by: slots.registry.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mlxfleet_agent import contract
from mlxfleet_agent.host import files

log = logging.getLogger(__name__)
SLOTS_FILE = "slots.json"
_SPEC = TypeAdapter(contract.SlotSpec)


def save(state_dir: Path, specs: dict[str, contract.SlotSpec]) -> None:
    body = {name: spec.model_dump(mode="json", exclude_none=True) for name, spec in specs.items()}
    files.write_atomic(state_dir / SLOTS_FILE, json.dumps({"slots": body}, indent=2).encode())


def load(state_dir: Path) -> dict[str, contract.SlotSpec]:
    """The persisted desired slots; an unreadable file is logged and moved aside, never fatal."""
    path = state_dir / SLOTS_FILE
    if not path.exists():
        return {}
    try:
        raw: Any = json.loads(path.read_text())
        slots = raw.get("slots", {})
        if not isinstance(slots, dict):
            raise ValueError("slots is not an object")
    except (OSError, ValueError, AttributeError) as exc:
        aside = path.with_suffix(".corrupt")
        log.error(
            "state file unreadable, moved aside", extra={"path": str(path), "error": str(exc)}
        )
        os.replace(path, aside)
        return {}
    out: dict[str, contract.SlotSpec] = {}
    for name, body in slots.items():
        try:
            out[str(name)] = _SPEC.validate_python(body)
        except ValidationError as exc:
            log.error(
                "persisted slot no longer valid, not restored",
                extra={"slot": name, "error": str(exc)},
            )
    return out
