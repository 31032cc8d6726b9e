"""Download progress from the agent's slot status to the ModelDeployment (placements, the Ready
condition's message) and the InferenceNode (its slots): pure core only."""

from __future__ import annotations

from mlxfleet_agent import contract
from mlxfleet_operator.api import fields
from mlxfleet_operator.core.deployment import footprint
from mlxfleet_operator.core.deployment import slots as dslots
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.kit import heartbeat, naming
from mlxfleet_operator.core.node import status as nodestatus
from tests.unit.operator.builders import GIB, NOW, A, B, fact, md, node, state
from tests.unit.operator.test_deployment import decision

SLOT = naming.slot_name("ns", "chat")


def slot(phase: str, source: str = A, **download: int) -> contract.SlotStatus:
    spec = contract.SlotSpec.model_validate({"source": source, "servedName": "chat"})
    return contract.SlotStatus(
        name=SLOT,
        served_name="chat",
        source=source,
        phase=phase,
        ready=False,
        spec=spec,
        download=contract.DownloadProgress.model_validate(download) if download else None,
    )


def status_of(*slots_on_n1: contract.SlotStatus, source: str = A) -> mdstatus.Result:
    d = md(source, replicas=1)
    chosen = decision(("n1",))
    return mdstatus.status(
        d,
        decision=chosen,
        facts={"n1": fact("n1", state(slots=slots_on_n1))},
        desired=dslots.desired_models(d, chosen, None),
        outcomes={},
        plan=None,
        footprint_bytes=GIB,
        endpoint="http://chat.ns.svc:80",
        now=NOW,
    )


def test_describe_shows_done_total_percent_and_rate() -> None:
    d = fields.DownloadStatus(bytes_done=3 * GIB // 2, bytes_total=5 * GIB, bytes_per_second=0)
    assert d.describe() == "1.50/5.00 GiB (30%, 0.0 MiB/s)"
    fast = fields.DownloadStatus(bytes_done=GIB, bytes_total=GIB, bytes_per_second=52 * 2**20)
    assert fast.describe() == "1.00/1.00 GiB (100%, 52.0 MiB/s)"
    unknown = fields.DownloadStatus(bytes_done=GIB // 2, bytes_total=0, bytes_per_second=0)
    assert unknown.describe() == "512.00 MiB (0.0 MiB/s, size unknown)"
    small = fields.DownloadStatus(bytes_done=3 * 2**20, bytes_total=12 * 2**20, bytes_per_second=0)
    assert small.describe() == "3.00/12.00 MiB (25%, 0.0 MiB/s)"


def test_downloading_replica_carries_progress_into_placement_and_ready_message() -> None:
    result = status_of(
        slot("Downloading", bytesDone=GIB, bytesTotal=4 * GIB, bytesPerSecond=2**20 * 10)
    )
    [placed] = result.status.placements
    assert placed.download == fields.DownloadStatus(
        bytes_done=GIB, bytes_total=4 * GIB, bytes_per_second=10 * 2**20
    )
    assert placed.message == "downloading 1.00/4.00 GiB (25%, 10.0 MiB/s)"
    ready = result.status.conditions[0]
    assert (ready.type, ready.status, ready.reason) == ("Ready", "False", "Loading")
    assert ready.message == "0/1 replicas ready; downloading 1.00/4.00 GiB (25%, 10.0 MiB/s) on n1"
    dumped = result.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["placements"][0]["download"] == {
        "bytesDone": GIB,
        "bytesTotal": 4 * GIB,
        "bytesPerSecond": 10 * 2**20,
    }


def test_loading_after_the_download_says_so_and_ready_has_no_progress() -> None:
    loading = status_of(slot("Loading", bytesDone=GIB, bytesTotal=GIB, bytesPerSecond=0))
    assert loading.status.placements[0].message == "loading (1.00 GiB downloaded)"
    assert loading.status.conditions[0].message.endswith("loading (1.00 GiB downloaded) on n1")
    done = status_of(slot("Pending"))
    assert done.status.placements[0].download is None
    assert done.status.conditions[0].message == "0/1 replicas ready"


def test_sizing_prefetch_shows_its_download() -> None:
    fetching = contract.CachedModel(
        id="a",
        source=A,
        size_bytes=0,
        download=contract.DownloadProgress(
            bytes_done=2**20, bytes_total=4 * 2**20, bytes_per_second=2**20
        ),
    )
    probe = decision(("n1",))
    got = footprint.sized(md(A), [], probe=probe, answers=[dfacts.Prefetch("n1", cached=fetching)])
    assert not isinstance(got, int)
    assert got.reason == "SizeUnknown"
    assert got.message == "downloading 1.00/4.00 MiB (25%, 1.0 MiB/s) on n1 (sized once on disk)"


def test_download_of_another_model_is_not_this_replicas_progress() -> None:
    other = slot("Downloading", source=B, bytesDone=1, bytesTotal=2, bytesPerSecond=0)
    result = status_of(other, source=A)
    assert result.status.placements[0].download is None


def test_node_status_copies_the_slot_download() -> None:
    s = slot("Downloading", bytesDone=5, bytesTotal=10, bytesPerSecond=1)
    got = nodestatus.status(
        node("n1"),
        nodestatus.Poll(state(slots=[s])),
        heartbeat.Health(ready=True, last_heartbeat=NOW),
        threshold=3,
        now=NOW,
    )
    [shown] = got.slots
    assert shown.download == fields.DownloadStatus(bytes_done=5, bytes_total=10, bytes_per_second=1)
