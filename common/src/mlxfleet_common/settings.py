"""One settings mechanism for the three programs: a pydantic model whose fields each carry an
`Opt(...)` gives a program's flags, its config-file keys and its environment variables from one
declaration (docs/development.md, "Declaring a setting").

`Opt("help")` makes the flag `--field-name` (or `flag=`); `env=` names an environment variable;
`file=False` keeps the field out of the config file (secrets). A field without `Opt` is a config
file key only. Config-file keys are the field name in snake_case or camelCase (`state_dir` or
`stateDir`), values as on the command line. Precedence: flags, then the config file, then the
environment, then the defaults (a flag left unset is None, an empty variable is unset).
A bad value names where it came from (the flag, the variable or the file key) and what is
allowed; an unknown file key names the nearest known one.
May import: pydantic, yaml and the standard library (never a program's package). Called by: the
agent's runtime.settings, the gateway's settings and cli, the operator's settings and main.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

M = TypeVar("M", bound=BaseModel)


class SettingsError(ValueError):
    """Settings that cannot run; the message names the flag, variable or file key and what is
    allowed."""


@dataclass(frozen=True, slots=True)
class Opt:
    """How a setting is given besides its config-file key (see the module docstring)."""

    help: str | None = None  # None: no flag
    flag: str | None = None  # default: "--" + the field name with dashes
    action: Any = None  # argparse action: "append", "store_true", BooleanOptionalAction...
    env: str | None = None
    file: bool = True
    short: str | None = None  # another option string, such as "-n"
    group: str | None = None  # the argparse group the flag is listed under in --help
    exclusive: str | None = None  # flags of one such name exclude each other (argparse)
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: its option strings, the setting it sets, argparse's other arguments."""

    option: str
    dest: str
    kwargs: dict[str, Any]
    short: str | None = None
    group: str | None = None
    exclusive: str | None = None


def opt(model: type[BaseModel], name: str) -> Opt:
    """The `Opt` of field `name` (an empty one: a config-file key only)."""
    found = [m for m in model.model_fields[name].metadata if isinstance(m, Opt)]
    return found[0] if found else Opt()


def _flag_type(annotation: Any) -> Any:
    """What argparse converts a flag's text with (None: keep the text)."""
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) in (list, tuple):
        annotation = get_args(annotation)[0]
    return annotation if annotation in (Path, int, float) else None


def option(model: type[BaseModel], name: str) -> str | None:
    """The flag of field `name`, or None: it has none."""
    o = opt(model, name)
    if o.help is None:
        return None
    return o.flag or "--" + name.replace("_", "-")


def flags(model: type[BaseModel]) -> list[Flag]:
    """Every flag of `model`, in declaration order."""
    out = []
    for name, info in model.model_fields.items():
        o = opt(model, name)
        flag = option(model, name)
        if flag is None:
            continue
        kwargs: dict[str, Any] = {"help": o.help, "default": None}
        if o.action is not None:
            kwargs["action"] = o.action
        if o.metavar is not None:
            kwargs["metavar"] = o.metavar
        plain = o.action not in ("store_true", "store_false", argparse.BooleanOptionalAction)
        if (kind := _flag_type(info.annotation)) is not None and plain:
            kwargs["type"] = kind
        out.append(Flag(flag, name, kwargs, o.short, o.group, o.exclusive))
    return out


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Add `model`'s flags to `parser` (in their groups, each group once)."""
    groups: dict[str, Any] = {}
    for flag in flags(model):
        target: Any = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_argument_group(flag.group)
            target = groups[flag.group]
        if flag.exclusive is not None:
            key = f"exclusive: {flag.exclusive}"
            if key not in groups:
                groups[key] = target.add_mutually_exclusive_group()
            target = groups[key]
        names = [flag.short, flag.option] if flag.short else [flag.option]
        target.add_argument(*names, dest=flag.dest, **flag.kwargs)


def flag_values(model: type[BaseModel], ns: argparse.Namespace) -> dict[str, Any]:
    """The values parsed into `ns` for `model`'s flags (None: not given)."""
    return {flag.dest: getattr(ns, flag.dest, None) for flag in flags(model)}


def environment(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the environment variable it is read from."""
    return {n: o.env for n in model.model_fields if (o := opt(model, n)).env is not None}


def snake(key: str) -> str:
    """A config-file key as a field name (`stateDir` -> `state_dir`)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def build(
    model: type[M],
    *,
    file_values: Mapping[str, Any],
    flag_values: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> M:
    """Merge the environment, the config file and the flags (in that order, the last wins) into
    `model`; SettingsError naming the source of each bad value and what is allowed."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name, var in environment(model).items():
        if env.get(var):
            merged[name] = env[var]
            origin[name] = f"environment variable {var}"
    for key, value in file_values.items():
        name = snake(key)
        if name in model.model_fields and not opt(model, name).file:
            raise SettingsError(
                f"config file key {key}: not read from the file (a secret); set "
                f"{opt(model, name).env} in the environment instead"
            )
        if name not in model.model_fields:
            raise SettingsError(_unknown(model, key))
        merged[name] = value
        origin[name] = f"config file key {key}"
    for name, value in flag_values.items():
        if value is not None and value != []:
            merged[name] = value
            origin[name] = option(model, name) or name
    try:
        return model.model_validate(merged, by_name=True)
    except ValidationError as exc:
        raise SettingsError(_explain(model, exc, origin)) from exc
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc


def _unknown(model: type[BaseModel], key: str) -> str:
    known = [to_camel(n) for n, f in model.model_fields.items() if opt(model, n).file]
    near = difflib.get_close_matches(to_camel(snake(key)), known, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return (
        f"config file key {key}: not a setting ({hint}the keys are the settings' names, "
        f"camelCase or snake_case: {', '.join(known)})"
    )


def _explain(model: type[BaseModel], exc: ValidationError, origin: Mapping[str, str]) -> str:
    """Each error of `exc` on a line: where the value came from, what is wrong, what is
    allowed (pydantic's words: "Input should be greater than 0")."""
    by_alias = {(f.alias or n): n for n, f in model.model_fields.items()}
    lines = []
    for error in exc.errors():
        msg = str(error["msg"]).removeprefix("Value error, ")
        loc = error["loc"]
        if not loc:  # a check across fields: it names its field first ("renew_deadline: ...")
            head = msg.split(":")[0].split(" ")[0]
            named = origin.get(head) or option(model, head) if head in model.model_fields else None
            lines.append(f"{named}: {msg}" if named else msg)
            continue
        name = by_alias.get(str(loc[0]), str(loc[0]))
        if name in origin:
            where = origin[name]
        elif error["type"] == "missing":
            ways = [w for w in (option(model, name), opt(model, name).env) if w]
            ways.append(f"config file key {to_camel(name)}")
            where, msg = to_camel(name), f"required (give {' or '.join(ways)})"
        else:
            where = name
        given = error.get("input")
        shown = "" if origin.get(name, "").startswith("environment") else f" {given!r}"
        if error["type"] == "missing" or not isinstance(given, str | int | float):
            shown = ""
        lines.append(f"{where}{shown}: {msg}")
    return "; ".join(lines)


def reason(exc: OSError) -> str:
    """An OSError as words, without its errno prefix (the caller names the path and the flag)."""
    return (exc.strerror or type(exc).__name__).lower()


def read_text(path: Path, *, flag: str, what: str) -> str:
    """The text of `path`; SettingsError naming `flag`, the path and what it should hold."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = reason(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        raise SettingsError(
            f"{flag} {path}: not a readable file ({why}); it should hold {what} as text"
        ) from None


def read_config_file(path: Path, *, what: str = "the settings (YAML or JSON)") -> dict[str, Any]:
    """Parse a YAML or JSON config file into a mapping (JSON is YAML, but report JSON errors)."""
    text = read_text(path, flag="--config", what=what)
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a mapping")
    return data
