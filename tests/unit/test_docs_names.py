"""The docs check (`make docs-check`, part of `make check`: tests/support/docscheck.py) finds a
name a doc gives that the code does not have, and says which doc line names what; the docs as
they are pass it (issue 28 item 1: docs that said the opposite of the code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import docscheck


@pytest.fixture(scope="module")
def known() -> dict[str, docscheck.Program]:
    return docscheck.programs()


def test_every_program_is_read_from_its_own_parsers(known: dict[str, docscheck.Program]) -> None:
    agent = known["mlxfleet-agent"]
    assert "--health-interval-s" in agent.subs["serve"].flags
    assert "--report-every" in agent.subs["leave"].flags  # join/leave parse on their own
    assert "--bare" in known["mlxfleet"].subs["dev"].subs["cluster-up"].flags
    assert {"status", "drain", "top"} <= set(known["kubectl mlxfleet"].subs)
    assert "--no-access-log" in known["mlxfleet-gateway"].flags
    assert "--namespaces" in known["mlxfleet-gateway new-key"].flags


def test_the_docs_name_only_what_exists(known: dict[str, docscheck.Program]) -> None:
    findings = docscheck.check(known=known)
    assert [str(f) for f in findings] == []


def test_each_kind_of_mistake_is_found_with_its_line(
    known: dict[str, docscheck.Program], tmp_path: Path
) -> None:
    doc = tmp_path / "new.md"
    doc.write_text(
        "# A page another engineer adds\n"
        "\n"
        "Poll with `--health-intervl-s` and run `make demoo`.\n"
        "`kubectl mlxfleet statuss` shows it; `mlxfleet-agent serve --nope 1` does not start.\n"
        "See `mlxfleet_agent.dataplane.nowhere` and `node-agent/src/mlxfleet_agent/gone.py`.\n"
        "Its reason is `WaitingForCapcity`.\n"
        "\n"
        "```bash\n"
        "mlxfleet dev cluster-up --bear\n"
        "helm install x charts/mlxfleet --set whatever=1   # another tool: not checked\n"
        "```\n"
        "Fine: `--data-port`, `make check`, `kubectl mlxfleet drain NODE --timeout 60`, reason "
        "`Ready`, `mlxfleet_agent.dataplane.answers.Stopper`, `core/fleet/placement.py`.\n"
    )
    found = [str(f) for f in docscheck.check([doc], known=known)]
    where = f"{doc}:"
    assert found == [
        f"{where}3: names `--health-intervl-s`, which no mlxfleet program has "
        "(did you mean `--health-interval-s`?)",
        f"{where}3: names `make demoo`, which the Makefile does not have "
        "(did you mean `make demo`?)",
        f"{where}4: names `kubectl mlxfleet statuss`, which is not a command of kubectl mlxfleet "
        "(did you mean `status`?)",
        f"{where}4: names `mlxfleet-agent serve ... --nope`, which mlxfleet-agent serve does not "
        "have",
        f"{where}5: names `mlxfleet_agent.dataplane.nowhere`, which is not in the tree",
        f"{where}5: names `node-agent/src/mlxfleet_agent/gone.py`, which is not in the tree",
        f"{where}6: names reason `WaitingForCapcity`, which is not a condition reason "
        "(did you mean `WaitingForCapacity`?)",
        f"{where}9: names `mlxfleet dev cluster-up ... --bear`, which mlxfleet dev cluster-up "
        "does not have (did you mean `--bare`?)",
    ]
