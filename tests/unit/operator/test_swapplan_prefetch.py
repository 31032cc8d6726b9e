"""Prefetch ahead of a SwapPlan (pure): which nodes copy the target now and from which peers,
and the step message while a node downloads; the InferenceNode `download` column text."""

from __future__ import annotations

from datetime import timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.node import status as nodestatus
from mlxfleet_operator.core.swapplan import prefetch
from mlxfleet_operator.core.swapplan import state as st
from tests.unit.operator.builders import GIB, NOW, state

S3 = "s3://models/b"
TARGET = ModelRef(S3)
URLS = {n: f"http://{n}:8470" for n in ("a", "b", "c", "d", "e", "f")}


def cached(source: str = S3, revision: str | None = None) -> contract.CachedModel:
    return contract.CachedModel(
        id="0123456789abcdef", source=source, revision=revision, size_bytes=1
    )


def copying(done: int = GIB, total: int = 4 * GIB, peer: int = 0) -> contract.AgentState:
    st_ = state()
    transfer = contract.Transfer(
        model_id="0123456789abcdef",
        source=S3,
        done_bytes=done,
        total_bytes=total,
        bytes_per_second=350e6,
        peer_bytes=peer,
        phase="peers",
    )
    return st_.model_copy(update={"transfers": [transfer]})


def step(node: str, phase: swp.StepPhase) -> swp.SwapStep:
    return swp.SwapStep(node=node, phase=phase, started_at=NOW - timedelta(seconds=5))


def test_nodes_without_the_target_copy_it_from_nodes_that_hold_it() -> None:
    states = {"a": state(), "b": state(), "c": state(cached=[cached()]), "d": None}
    out = prefetch.wanted(st.PlanState(), TARGET, ["a", "b", "d"], states, URLS)
    assert out == [
        prefetch.Prefetch("a", TARGET, (URLS["c"],)),
        prefetch.Prefetch("b", TARGET, (URLS["c"],)),
    ]  # d is not polled yet: asked on a later run


def test_no_prefetch_for_a_node_that_holds_or_is_copying_it_or_a_finished_plan() -> None:
    states = {"a": state(cached=[cached()]), "b": copying()}
    assert prefetch.wanted(st.PlanState(), TARGET, ["a", "b"], states, URLS) == []
    done = st.PlanState(phase=swp.SwapPhase.COMPLETED)
    assert prefetch.wanted(done, TARGET, ["c"], {"c": state()}, URLS) == []


def test_with_swap_prefetch_off_no_node_copies_ahead() -> None:
    states = {"a": state(), "b": state(), "c": state(cached=[cached()])}
    assert prefetch.wanted(st.PlanState(), TARGET, ["a", "b"], states, URLS, enabled=False) == []
    assert len(prefetch.wanted(st.PlanState(), TARGET, ["a", "b"], states, URLS)) == 2


def test_another_revision_is_not_the_target_and_peers_are_capped() -> None:
    holders = {n: state(cached=[cached()]) for n in ("b", "c", "d", "e")}
    states = {"a": state(cached=[cached(revision="v1")]), **holders}
    (ask,) = prefetch.wanted(st.PlanState(), TARGET, ["a"], states, URLS)
    assert ask.node == "a"
    assert ask.peers == tuple(URLS[n] for n in ("b", "c", "d"))  # MAX_PEERS, by name
    (alone,) = prefetch.wanted(st.PlanState(), TARGET, ["a"], {"a": state()}, URLS)
    assert alone.peers == ()  # nobody holds it: the agent fetches from the origin


def test_a_step_waiting_on_a_download_shows_its_progress() -> None:
    plan = st.PlanState(
        phase=swp.SwapPhase.PROGRESSING,
        steps=(
            step("a", swp.StepPhase.COMPLETED),
            step("b", swp.StepPhase.LOADING),
            step("c", swp.StepPhase.PENDING),
        ),
    )
    states = {"a": copying(), "b": copying(done=GIB, peer=GIB), "c": state()}
    out = prefetch.annotate(plan, TARGET, states)
    assert out.steps[0] == plan.steps[0]  # a finished step keeps its message
    assert out.steps[1].message == "downloading 1.0/4.0 GiB at 350 MB/s (1.0 GiB from peers)"
    assert out.steps[2] == plan.steps[2]  # c copies nothing


def test_download_column_text() -> None:
    assert nodestatus.download_summary([]) is None
    one = copying().transfers
    assert nodestatus.download_summary(one) == "1.0/4.0 GiB 350 MB/s"
    assert nodestatus.download_summary([*one, *one]) == "2.0/8.0 GiB 700 MB/s +1"


def test_peers_for_a_sizing_prefetch_are_other_holders() -> None:
    states = {"a": state(cached=[cached()]), "b": state(), "c": None}
    assert prefetch.peers_for("b", TARGET, states, URLS) == (URLS["a"],)
    assert prefetch.peers_for("a", TARGET, states, URLS) == ()  # never itself
