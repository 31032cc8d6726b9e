"""Per-node credentials (issue 22): the derivation every part shares (`contract.credentials`) and
the agent's store of its own keys (`host.credentials.NodeKeys`): when the data plane is open,
which keys it accepts, which fetch tokens open which model."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.host import credentials

C = contract.credentials
FLEET = "f" * 40
MID, OTHER_MID = "0123456789abcdef", "fedcba9876543210"


def test_each_node_and_kind_gets_its_own_key_and_none_is_the_fleet_key() -> None:
    keys = {
        C.data_plane_key(FLEET, "a"), C.data_plane_key(FLEET, "b"),
        C.peer_key(FLEET, "a"), C.peer_key(FLEET, "b"), C.data_plane_key("g" * 40, "a"),
    }  # fmt: skip
    assert len(keys) == 5
    assert FLEET not in keys
    assert all(len(k) == 64 for k in keys)
    creds = C.for_node((FLEET, "g" * 40), "a")
    assert creds.data_plane == [C.data_plane_key(FLEET, "a"), C.data_plane_key("g" * 40, "a")]
    assert C.fingerprint(creds) == C.fingerprint(C.for_node((FLEET, "g" * 40), "a"))
    assert C.fingerprint(creds) != C.fingerprint(C.for_node((FLEET,), "a"))
    assert FLEET not in repr(creds)
    assert creds.data_plane[0] not in repr(creds)


def test_a_fetch_token_opens_one_model_for_one_node_on_one_peer() -> None:
    peer_b = C.peer_key(FLEET, "b")
    token = C.fetch_token(peer_b, fetcher="a", model_id=MID)
    assert token.startswith("a/")
    assert C.fetcher_of(token, peer_keys=[peer_b], model_id=MID) == "a"
    assert C.fetcher_of(token, peer_keys=[peer_b], model_id=OTHER_MID) is None
    assert C.fetcher_of(token, peer_keys=[C.peer_key(FLEET, "c")], model_id=MID) is None
    assert C.fetcher_of(token.replace("a/", "c/"), peer_keys=[peer_b], model_id=MID) is None
    assert C.fetcher_of(peer_b, peer_keys=[peer_b], model_id=MID) is None
    assert C.fetcher_of("", peer_keys=[peer_b], model_id=MID) is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("", "no key", id="empty"),
        pytest.param("x" * 31, "at least 32", id="short"),
        pytest.param("x" * 20 + " " + "y" * 20, "without spaces", id="space"),
        pytest.param("x" * 40 + "\u00e9", "printable ASCII", id="non-ascii"),
        pytest.param("\n".join(["z" * 40] * 5), "at most 4", id="five"),
    ],
)
def test_bad_fleet_keys_are_refused_naming_the_flag(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said) as info:
        C.parse_fleet_keys(text, flag="--fleet-key-file K")
    assert "--fleet-key-file K" in str(info.value)


def test_fleet_keys_skip_comments_and_keep_their_order() -> None:
    text = "# rotation\n" + "a" * 32 + "\n\n" + "b" * 40 + "\n"
    assert C.parse_fleet_keys(text, flag="f") == ("a" * 32, "b" * 40)


def test_the_model_id_is_the_agents_cache_id() -> None:
    from mlxfleet_agent.models import source

    assert C.model_id("s3://bucket/m", "v1") == source.parse("s3://bucket/m", "v1").id


def test_keyless_is_open_only_where_it_may_be_and_any_key_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    assert credentials.NodeKeys(path, may_be_open=True).open
    closed = credentials.NodeKeys(path, may_be_open=False)
    assert not closed.open
    assert not closed.accepts(b"")
    with_file = credentials.NodeKeys(path, file_keys=frozenset({"mine"}), may_be_open=True)
    assert not with_file.open
    assert with_file.accepts(b"mine")
    mine = C.for_node((FLEET,), "a")
    with_file.save(mine)
    assert with_file.use(mine) == C.fingerprint(mine)
    assert with_file.accepts(mine.data_plane[0].encode())
    assert with_file.accepts(b"mine")
    assert not with_file.accepts(mine.peer[0].encode())
    assert not with_file.accepts(C.data_plane_key(FLEET, "b").encode())
    again = credentials.NodeKeys(path, may_be_open=True)  # read back at start
    assert (again.open, again.fingerprint) == (False, C.fingerprint(mine))
    assert path.stat().st_mode & 0o777 == 0o600


def test_peer_tokens_and_the_legacy_shared_token(tmp_path: Path) -> None:
    keys = credentials.NodeKeys(tmp_path / "c.json")
    before = keys.serves_peers
    assert not before
    mine = C.for_node((FLEET,), "b")
    keys.use(mine)
    assert keys.serves_peers
    token = C.fetch_token(mine.peer[0], fetcher="a", model_id=MID)
    assert keys.fetcher(token.encode(), model_id=MID) == "a"
    assert keys.fetcher(token.encode(), model_id=OTHER_MID) is None
    assert keys.fetcher(b"\xff\xfe", model_id=MID) is None
    legacy = credentials.NodeKeys(tmp_path / "l.json", legacy_peer_token="shared-token-of-16")
    assert legacy.serves_peers
    assert legacy.fetcher(b"shared-token-of-16", model_id=OTHER_MID) == "peer"
    assert legacy.fetcher(b"shared-token-of-17", model_id=MID) is None


@pytest.mark.parametrize(
    "damage", [b"{not json", b'{"dataPlane": ["short"]}', b"\xff\xfe", b'{"dataPlane": []}']
)
def test_a_damaged_credentials_file_leaves_the_data_plane_closed(
    tmp_path: Path, damage: bytes
) -> None:
    path = tmp_path / "credentials.json"
    path.write_bytes(damage)
    keys = credentials.NodeKeys(path, may_be_open=False)
    assert (keys.open, keys.fingerprint, keys.data_keys) == (False, None, ())
    assert (tmp_path / "credentials.json.bad").read_bytes() == damage
