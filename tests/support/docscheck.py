"""Every name the docs give a reader exists (issue 28 item 1; `make check` runs it): each
`--flag` of one of the project's programs, each `make TARGET`, each subcommand of `mlxfleet`,
`mlxfleet-agent`, `mlxfleet-gateway` and `kubectl mlxfleet`, each module or file path in the
tree and each condition reason. The reverse (every reason and gateway error code has its entry)
is tests/unit/api/test_troubleshooting_docs.py and
tests/unit/gateway/test_error_codes_documented.py.

Names come from the code, not from a list kept by hand: each program's argparse parsers are
caught as its `main` answers `--help` (nothing is printed), targets from the Makefile, reasons from
`api.conditions.Reason`. A doc line is read as the reader reads it: an inline code span or a line
of a code block whose command is one of ours is checked against that command's flags; a bare
`--flag` against every program's; a command of another tool (kubectl, helm, mlx_lm, curl...) is
not ours to check. Each finding says which doc line names what, and the nearest real name.

    python -m tests.support.docscheck        # exit 1 and one line per finding

The maps of the code in docs/development.md are checked by tests/support/docmaps.py, its list of
modules over 450 lines by tests/support/bigmodules.py (both run here).

May import: the standard library and the project's command-line modules. Called by: the
Makefile (`make docs-check`, part of `make check`), tests/unit/test_docs_names.py.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import io
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "charts/mlxfleet/README.md",
]
PACKAGES = {
    "mlxfleet_agent": REPO / "node-agent/src/mlxfleet_agent",
    "mlxfleet_operator": REPO / "operator/src/mlxfleet_operator",
    "mlxfleet_gateway": REPO / "gateway/src/mlxfleet_gateway",
    "mlxfleet_common": REPO / "common/src/mlxfleet_common",
}
# program as a reader types it -> "module:function" of its main(argv)
PROGRAMS = {
    "mlxfleet": "mlxfleet_operator.cli:main",
    "mlxfleet-operator": "mlxfleet_operator.main:main",
    "mlxfleet-agent": "mlxfleet_agent.cli:main",
    "mlxfleet-gateway": "mlxfleet_gateway.cli:main",
    "mlxfleet-gateway new-key": "mlxfleet_gateway.cli:main new-key",  # dispatched by hand
    "kubectl mlxfleet": "mlxfleet_operator.kubectl_plugin.cli:main",
    "kubectl-mlxfleet": "mlxfleet_operator.kubectl_plugin.cli:main",
    "python -m mlxfleet_agent.engines.bench": "mlxfleet_agent.engines.bench:main",
    "python -m mlxfleet_agent.engines.embed_server": "mlxfleet_agent.engines.embed_server:main",
    "python -m benchmarks.agent_bench": "benchmarks.agent_bench:main",
    "python -m benchmarks.embed_bench": "benchmarks.embed_bench:main",
    "python -m benchmarks.gateway_bench": "benchmarks.gateway_bench:main",
    "python -m benchmarks.operator_bench": "benchmarks.operator_bench:main",
    "python -m benchmarks.paced_server": "benchmarks.paced_server:main",
    "python -m benchmarks.peer_bench": "benchmarks.peer_bench:main",
    "python -m benchmarks.prefetch_bench": "benchmarks.prefetch_bench:main",
    "python -m benchmarks.relay_floors": "benchmarks.relay_floors:main",
    "python -m benchmarks.report_bench": "benchmarks.report_bench:main",
    "python -m benchmarks.scale": "benchmarks.scale.__main__:main",
    "python -m tests.support.hollow": "tests.support.hollow.__main__:main",
}
# commands of other tools: their flags are not ours to check
FOREIGN = (
    "kubectl",
    "helm",
    "curl",
    "git",
    "pip",
    "python -m pip",
    "python -m mlx_lm",
    "mlx_lm",
    "mlx.launch",
    "go",
    "openssl",
    "jq",
    "launchctl",
    "systemctl",
    "sudo launchctl",
    "pytest",
    ".venv/bin/pytest",
    "make",
    "kube-apiserver",
    "etcd",
    "weed",
    "docker",
    "crane",
    "flux",
    "argocd",
    "promtool",
    "kstatus",
    "ip",
    "tc",
    "faketime",
    "pdftotext",
    "sha256sum",
    "ssh",
    "scp",
    "rsync",
    "brew",
    "apt-get",
    "uv",
    "python -m venv",
    "ls",
    "cat",
    "export",
    "source",
    "vllm",
    "python -m vllm",
    "caffeinate",
    "pmset",
    "fdesetup",
    "powermetrics",
    "sysctl",
    "nvidia-smi",
    "tar",
    "cp",
    "mv",
    "rm",
    "mkdir",
    "chmod",
    "chown",
    "install",
    "env",
    "xargs",
    "grep",
    "sed",
    "awk",
    "find",
    "echo",
    "printf",
    "time",
    "timeout",
    "watch",
)
# a paragraph (or section) about one of these is about another tool's flags and files
FOREIGN_WORDS = re.compile(
    r"mlx_lm|mlx-lm|mlx\.launch|kube-apiserver|API server runs|\betcd\b|\bhelm\b|kubectl "
    r"(?!mlxfleet)|\bcurl\b|\bpytest\b|\bvllm\b|vLLM|launchd|systemd|Argo CD|\bFlux\b|"
    r"kustomize|huggingface|Hugging Face|mlx-embeddings|sentence-transformers|\bgo install\b"
)
# records of past runs: they name the code as it was then (flags, make targets still checked)
HISTORY = frozenset({"benchmarks.md"})
FLAG = re.compile(r"(?<![\w/=-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
MAKE = re.compile(r"\bmake\s+([a-z][a-z0-9-]*)")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
MODULE = re.compile(r"\b((?:mlxfleet_agent|mlxfleet_operator|mlxfleet_gateway)(?:\.\w+)+)")
PATH = re.compile(r"^(?:\./)?([\w.-]+(?:/[\w.*-]+)+/?)$")
REASON_HINT = re.compile(r"\breasons?\b", re.I)
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")


@dataclass(frozen=True)
class Finding:
    where: str  # docs/agent.md:129
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


@dataclass
class Program:
    """One program: its flags and subcommands (each a Program), from its argparse parsers."""

    flags: set[str] = field(default_factory=set)
    subs: dict[str, Program] = field(default_factory=dict)

    def all_flags(self) -> set[str]:
        out = set(self.flags)
        for sub in self.subs.values():
            out |= sub.all_flags()
        return out


# ---- names from the code ---------------------------------------------------------------------


class _Caught(BaseException):
    """Raised in place of printing help: the parser that would print it is all we want."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _capture(entry: Callable[..., object], argv: list[str]) -> argparse.ArgumentParser | None:
    """The parser that answers `argv + ["--help"]` (its help is never printed)."""

    def caught(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _Caught(self)

    with (
        mock.patch.object(argparse.ArgumentParser, "print_help", caught),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        try:
            if inspect.signature(entry).parameters:
                entry([*argv, "--help"])
            else:  # a main() that reads sys.argv
                with mock.patch.object(sys, "argv", ["prog", *argv, "--help"]):
                    entry()
        except _Caught as got:
            return got.parser
        except (Exception, SystemExit):
            return None
    return None


def _walk(
    parser: argparse.ArgumentParser,
    entry: Callable[[list[str]], object],
    prefix: list[str],
    depth: int,
) -> Program:
    prog = Program()
    for action in parser._actions:
        prog.flags |= {o for o in action.option_strings if o.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            names = list(action.choices)
        elif (
            not action.option_strings
            and action.choices
            and all(isinstance(c, str) for c in action.choices)
        ):
            names = [str(c) for c in action.choices]  # `mlxfleet <command>` dispatching by hand
        else:
            continue
        for name in names:
            own = _capture(entry, [*prefix, name]) if depth < 3 else None
            prog.subs[name] = (
                _walk(own, entry, [*prefix, name], depth + 1) if own is not None else Program()
            )
    return prog


def programs() -> dict[str, Program]:
    """Every program of `PROGRAMS`, walked (one that cannot be imported, or shows no flag, is an
    error: the check would otherwise pass without looking)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    out = {}
    for name, target in PROGRAMS.items():
        where, *prefix = target.split()
        module, _, func = where.partition(":")
        entry = getattr(importlib.import_module(module), func)
        top = _capture(entry, prefix)
        out[name] = _walk(top, entry, prefix, 0) if top is not None else Program()
        if not out[name].all_flags():
            raise RuntimeError(f"docscheck: found no flags of `{name}` ({target})")
    return out


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", text, flags=re.M))


def reasons() -> set[str]:
    from mlxfleet_operator.api import conditions

    return {r.value for r in conditions.Reason}


def camel_words() -> set[str]:
    """CamelCase names the code defines: classes, string literals (kinds, phases, event reasons,
    enum values) and the CRDs' enums; a reason a doc names outside these does not exist."""
    words: set[str] = set()
    sources = [p for root in PACKAGES.values() for p in root.rglob("*.py")]
    for path in [*sources, *sorted((REPO / "crds").glob("*.yaml"))]:
        text = path.read_text(errors="replace")
        words |= set(re.findall(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b", text))
    return words


# ---- what the docs name --------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    number: int
    text: str  # a code block's continued command joined into one line
    fenced: bool  # inside a code block
    context: str  # the heading above it and its paragraph (what a reader reads it in)


def _lines(path: Path) -> Iterator[Line]:
    """The lines of a Markdown file, as `Line`s."""
    raw = path.read_text().splitlines()
    fenced, heading, held = False, "", ""
    paragraph: list[str] = []
    start = 0
    for number, line in enumerate(raw, start=1):
        if line.lstrip().startswith("```"):
            fenced, paragraph = not fenced, []
            continue
        if not fenced and line.startswith("#"):
            heading, paragraph = line, []
            continue
        if not fenced and not line.strip():
            paragraph = []
            continue
        paragraph.append(line)
        if fenced and line.rstrip().endswith("\\"):
            held, start = held + line.rstrip()[:-1] + " ", start or number
            continue
        text, at = held + line, start or number
        held, start = "", 0
        yield Line(at, text, fenced, heading + "\n" + "\n".join(paragraph))
    # a paragraph's later lines give context to its earlier ones too: read whole paragraphs


def _snippets(line: str, fenced: bool) -> list[str]:
    """What a reader would type or look up: the whole line in a code block, else code spans."""
    if fenced:
        return [line.split(" #", 1)[0]] if not line.lstrip().startswith("#") else []
    return SPAN.findall(line)


def _command(snippet: str, known: dict[str, Program]) -> tuple[str | None, list[str]]:
    """(our program, its words after the name) when the snippet runs one of ours; ("", []) for
    another tool's command; (None, []) when it names no command."""
    text = re.sub(r"^\s*(?:\$\s+|sudo\s+|(?:[A-Z_]+=\S+\s+)+)", "", snippet.strip())
    text = (
        re.sub(r"^(?:\S*/)?(\.venv/bin/|bin/)?", "", text)
        if text.startswith((".", "/", "$"))
        else text
    )
    text = re.sub(r"^\$\(BIN\)/|^\$BIN/|^\.venv/bin/", "", text)
    for name in sorted(known, key=len, reverse=True):
        if text == name or text.startswith(name + " "):
            return name, text[len(name) :].split()
    for other in FOREIGN:
        if text == other or text.startswith(other + " "):
            return "", []
    return None, []


def _near(name: str, choices: set[str], *, prefix: str = "") -> str:
    found = difflib.get_close_matches(name, sorted(choices), n=1)
    return f" (did you mean `{prefix}{found[0]}`?)" if found else ""


def check(
    docs: list[Path] | None = None,
    *,
    known: dict[str, Program] | None = None,
) -> list[Finding]:
    known = programs() if known is None else known
    every_flag = set().union(*(p.all_flags() for p in known.values()))
    targets, all_reasons, camel = make_targets(), reasons(), camel_words()
    findings: list[Finding] = []
    for doc in docs or DOCS:
        rel = doc.relative_to(REPO) if doc.is_relative_to(REPO) else doc
        lines = list(_lines(doc))
        paragraphs = _paragraph_text(lines)
        for ln in lines:
            where = f"{rel}:{ln.number}"
            foreign = bool(FOREIGN_WORDS.search(ln.context + paragraphs.get(ln.number, "")))
            for snippet in _snippets(ln.text, ln.fenced):
                findings += _check_snippet(
                    snippet,
                    where,
                    known,
                    every_flag,
                    targets,
                    foreign=foreign,
                    history=doc.name in HISTORY,
                )
            if not ln.fenced and REASON_HINT.search(ln.text):
                for word in SPAN.findall(ln.text):
                    word = word.strip()
                    if CAMEL.match(word) and word not in all_reasons and word not in camel:
                        findings.append(
                            Finding(
                                where,
                                f"names reason `{word}`, which is not a condition "
                                f"reason{_near(word, all_reasons)}",
                            )
                        )
    return findings


def _paragraph_text(lines: list[Line]) -> dict[int, str]:
    """Line number -> the whole paragraph it is in (its lines before and after it)."""
    out: dict[int, str] = {}
    group: list[Line] = []
    for ln in [*lines, None]:
        if ln is None or not group or ln.number != group[-1].number + 1 or ln.fenced:
            text = "\n".join(g.text for g in group)
            out.update({g.number: text for g in group})
            group = []
        if ln is not None and not ln.fenced:
            group.append(ln)
    return out


def _check_snippet(
    snippet: str,
    where: str,
    known: dict[str, Program],
    every_flag: set[str],
    targets: set[str],
    *,
    foreign: bool,
    history: bool,
) -> list[Finding]:
    out: list[Finding] = []
    if "..." in snippet:
        return out  # an elided path or command: a pattern, not a name
    for target in MAKE.findall(snippet):
        if target not in targets:
            out.append(
                Finding(
                    where,
                    f"names `make {target}`, which the Makefile does not have"
                    f"{_near(target, targets, prefix='make ')}",
                )
            )
    for module in [] if history else MODULE.findall(snippet):
        if not _module_exists(module):
            out.append(Finding(where, f"names `{module}`, which is not in the tree"))
    path = None if history or foreign else PATH.match(snippet.strip())
    if path and not _path_exists(path.group(1)):
        out.append(Finding(where, f"names `{path.group(1)}`, which is not in the tree"))
    name, words = _command(snippet, known)
    if name == "":
        return out  # another tool's command
    flags = set(FLAG.findall(snippet))
    if name is None:
        if foreign or history:
            return out  # another tool's flags; a record of a past run
        for flag in sorted(flags - every_flag):
            if snippet.strip().startswith(flag):  # a flag on its own: one of ours
                out.append(
                    Finding(
                        where,
                        f"names `{flag}`, which no mlxfleet program has{_near(flag, every_flag)}",
                    )
                )
        return out
    prog, said = known[name], name
    for word in words:
        if word.startswith("-") or prog.subs == {} or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            break
        if word not in prog.subs:
            out.append(
                Finding(
                    where,
                    f"names `{said} {word}`, which is not a command of "
                    f"{said}{_near(word, set(prog.subs))}",
                )
            )
            return out
        prog, said = prog.subs[word], f"{said} {word}"
    allowed = prog.all_flags() | known[name].flags
    for flag in sorted(flags - allowed):
        out.append(
            Finding(
                where,
                f"names `{said} ... {flag}`, which {said} does not have{_near(flag, allowed)}",
            )
        )
    return out


def _module_exists(dotted: str) -> bool:
    """The longest prefix of `dotted` that is a module exists, and what follows is a name its
    source defines (`contract.SlotSpec`, `answers.Stopper.feed`)."""
    package, *parts = dotted.split(".")
    root = PACKAGES[package]
    for cut in range(len(parts), -1, -1):
        base = root.joinpath(*parts[:cut])
        found = base.with_suffix(".py") if cut else None
        source = None
        if found is not None and found.is_file():
            source = found
        elif base.is_dir() and (base / "__init__.py").is_file():
            source = base / "__init__.py"
        if source is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        text = (
            source.read_text()
            if source.name != "__init__.py"
            else "".join(p.read_text() for p in source.parent.glob("*.py"))
        )
        return bool(re.search(rf"\b{re.escape(rest[0])}\b", text))
    return False


PACKAGE_DIRS = {d.name for root in PACKAGES.values() for d in root.iterdir() if d.is_dir()}
TOP_DIRS = {d.name for d in REPO.iterdir() if d.is_dir() and not d.name.startswith(".")}


def _path_exists(path: str) -> bool:
    """A relative path whose first part is a folder of the repository or of one of the packages
    must be there (a glob may stand for a name); anything else is not a path of ours. A last
    part `module.name` (no file suffix) is a name in that module (`handlers/guard.guarded`)."""
    head, _, last = path.rpartition("/")
    stem, dot, attr = last.partition(".")
    if dot and attr and not re.fullmatch(r"[a-z0-9]{1,5}", attr.split(".")[-1] or ""):
        module = f"{head}/{stem}.py" if head else f"{stem}.py"
        if not _path_exists(module):
            return False
        name = attr.split(".")[0]
        return any(
            re.search(rf"\b{re.escape(name)}\b", p.read_text())
            for root in _roots(module.split("/", 1)[0])
            for p in root.glob(module)
        )
    roots = _roots(path.split("/", 1)[0])
    clean = path.rstrip("/")
    return not roots or any(list(root.glob(clean)) for root in roots)


def _roots(first: str) -> list[Path]:
    """Where a relative path starting with folder `first` lives (none: not a path of ours)."""
    if first in TOP_DIRS:
        return [REPO]
    if first in PACKAGE_DIRS or first in PACKAGES:
        return [
            REPO / "node-agent/src",
            REPO / "operator/src",
            REPO / "gateway/src",
            REPO / "common/src",
            *PACKAGES.values(),
        ]
    return []


def main() -> int:
    from tests.support import bigmodules, docmaps  # it reads the docs with this module's parts

    findings = check() + docmaps.check() + bigmodules.check()
    for finding in findings:
        print(finding)
    if findings:
        print(f"\n{len(findings)} name(s) in the docs do not exist (tests/support/docscheck.py)")
    else:
        print(f"docs check: every name in {len(DOCS)} documents exists")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
