"""The Responses conversations the gateway keeps (core.conversations): per key, bounded by count,
bytes and age, whole conversations or a clear error, never a shorter one."""

from __future__ import annotations

import pytest

from mlxfleet_gateway.core import conversations as conv

HI = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def store(**kw: object) -> conv.Conversations:
    return conv.Conversations(tag="abcd1234", **kw)  # type: ignore[arg-type]


def test_a_chain_is_rebuilt_oldest_first() -> None:
    s = store()
    a, b, c = s.new_id(), s.new_id(), s.new_id()
    assert a.startswith("resp_abcd1234")
    assert len({a, b, c}) == 3
    s.put(key="k", id=a, parent=None, messages=HI, now=0)
    s.put(key="k", id=b, parent=a, messages=[{"role": "user", "content": "2"}], now=1)
    s.put(key="k", id=c, parent=b, messages=[{"role": "user", "content": "3"}], now=2)
    assert [m["content"] for m in s.history(key="k", id=c, now=3)] == ["hi", "hello", "2", "3"]
    assert [m["content"] for m in s.history(key="k", id=a, now=3)] == ["hi", "hello"]


def test_another_key_reads_nothing_and_hears_what_an_unknown_id_hears() -> None:
    s = store()
    a = s.new_id()
    s.put(key="team-a", id=a, parent=None, messages=HI, now=0)
    with pytest.raises(conv.NotKept) as other:
        s.history(key="team-b", id=a, now=1)
    with pytest.raises(conv.NotKept) as unknown:
        s.history(key="team-a", id=a[:-4] + "ffff", now=1)
    assert str(other.value).replace(a, "X") == str(unknown.value).replace(unknown.value.asked, "X")


def test_an_id_of_another_replica_is_named_so() -> None:
    with pytest.raises(conv.NotKept, match="not answered by this gateway replica"):
        store().history(key="k", id="resp_99999999" + "0" * 24, now=0)


def test_turns_expire_after_the_ttl() -> None:
    s = store(ttl_s=10)
    a = s.new_id()
    s.put(key="k", id=a, parent=None, messages=HI, now=0)
    assert s.history(key="k", id=a, now=9.9)
    with pytest.raises(conv.NotKept, match="no longer kept"):
        s.history(key="k", id=a, now=10)
    assert len(s) == 0
    assert s.bytes == 0


def test_a_missing_link_is_an_error_naming_it_never_a_shorter_conversation() -> None:
    s = store(max_turns=2)
    a, b, c = s.new_id(), s.new_id(), s.new_id()
    s.put(key="k", id=a, parent=None, messages=HI, now=0)
    s.put(key="k", id=b, parent=a, messages=HI, now=1)
    s.put(key="k", id=c, parent=b, messages=HI, now=2)  # a is evicted (count)
    with pytest.raises(conv.NotKept) as info:
        s.history(key="k", id=c, now=3)
    assert info.value.missing == a
    assert a in str(info.value)
    assert c in str(info.value)


def test_when_full_the_key_holding_the_most_loses_its_oldest_first() -> None:
    one = len(b'[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]')
    s = store(max_bytes=one * 4)
    quiet = s.new_id()
    s.put(key="quiet", id=quiet, parent=None, messages=HI, now=0)
    busy = [s.new_id() for _ in range(5)]
    for i, rid in enumerate(busy):
        s.put(key="busy", id=rid, parent=None, messages=HI, now=1 + i)
    assert s.bytes <= one * 4
    assert s.history(key="quiet", id=quiet, now=9)  # the light tenant keeps its turn
    with pytest.raises(conv.NotKept):
        s.history(key="busy", id=busy[0], now=9)
    assert s.history(key="busy", id=busy[-1], now=9)


def test_a_turn_larger_than_the_store_is_not_kept() -> None:
    s = store(max_bytes=10)
    assert not s.put(key="k", id=s.new_id(), parent=None, messages=HI, now=0)
    assert len(s) == 0
