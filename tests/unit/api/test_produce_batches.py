"""A JSON produce's batches: the one-pass path for plain records builds the same bytes
and placements as the general per-record loop (app/api/routers/records.py)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.produce_body import parse_produce_body
from app.api.routers import records as records_module
from app.api.routers.records import _plain_json_batches, build_batches
from app.common.batch import BatchBuilder, RecordBatchReader
from app.common.partitioner import murmur2, partition_for_key

NOW = 1_700_000_000_000

try:
    from app.common import _jsonrecords
except ImportError:  # pragma: no cover - no C compiler where the tests run
    _jsonrecords = None  # type: ignore[assignment]


@pytest.fixture(params=["native", "python"], autouse=True)
def plain_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test here runs on both paths of the plain loop: the broker's C helper
    (app/common/_jsonrecords.c) and the Python loop used where it is not built."""
    if request.param == "native":
        if _jsonrecords is None:
            pytest.skip("app.common._jsonrecords is not built")
        assert records_module.plain_records is not None
    else:
        monkeypatch.setattr(records_module, "plain_records", None)
    yield request.param


def _expected(records: list[dict], partitions: int, sticky: int) -> tuple[dict, list]:
    """Per record, what the general loop does: encode, place, append."""
    builders: dict[int, BatchBuilder] = {}
    placed = []
    for rec in records:
        key = None if rec.get("key") is None else orjson.dumps(rec["key"])
        value = None if rec.get("value") is None else orjson.dumps(rec["value"])
        p = sticky if key is None else partition_for_key(key, partitions)
        builder = builders.setdefault(p, BatchBuilder())
        placed.append((p, len(builder), NOW))
        builder.append(value, key, [], NOW)
    return {p: b.build() for p, b in builders.items()}, placed


def _body(records: list[dict]) -> bytes:
    return orjson.dumps({"records": records})


def test_plain_records_build_the_general_loops_bytes_and_placements() -> None:
    records = [{"key": f"user-{i}", "value": {"n": i}} for i in range(50)]
    records += [{"value": "no key"}, {"key": None, "value": None}, {}, {"key": [1, 2]}]
    req = parse_produce_body(_body(records))
    fast = _plain_json_batches(req, 4, lambda: 3, NOW)
    assert fast is not None
    builders, placed = fast
    expected, expected_placed = _expected(records, 4, 3)
    assert {p: b.build() for p, b in builders.items()} == expected
    assert placed == expected_placed
    # And the batch holds the records in request order within its partition.
    for p, data in expected.items():
        values = [r.value for r in RecordBatchReader(data)]
        assert values == [
            None if rec.get("value") is None else orjson.dumps(rec["value"])
            for rec in records
            if (p == 3 and rec.get("key") is None)
            or (rec.get("key") is not None and partition_for_key(orjson.dumps(rec["key"]), 4) == p)
        ]


@pytest.mark.parametrize(
    "odd",
    [
        {"key": "k", "value": 1, "headers": {"h": "v"}},
        {"key": "k", "value": 1, "partition": 2},
        {"key": "k", "value": 1, "timestamp": 5},
    ],
)
def test_any_other_record_goes_to_the_general_loop(odd: dict) -> None:
    records = [{"key": "a", "value": 1}, odd, {"key": "b", "value": 2}]
    req = parse_produce_body(_body(records))
    assert _plain_json_batches(req, 4, lambda: 0, NOW) is None
    builders, placed = build_batches(req, 4, None, lambda: 0, NOW)
    assert len(placed) == 3
    assert sum(len(b) for b in builders.values()) == 3
    if "partition" in odd:
        assert placed[1][0] == 2
    if "timestamp" in odd:
        assert placed[1][2] == 5


def test_extend_refuses_a_built_batch_and_stops_when_full() -> None:
    builder = BatchBuilder(max_bytes=200)
    assert builder.extend([(b"k", b"v" * 50)], NOW)
    assert not builder.extend([(b"k", b"v" * 50)] * 10, NOW)
    assert 1 <= len(builder) < 11
    builder.build()
    with pytest.raises(Exception, match="already built"):
        builder.extend([(None, b"x")], NOW)


@pytest.mark.parametrize("partitions", [1, 3, 4, 7])
def test_unkeyed_mixed_and_long_records_on_several_partition_counts(partitions: int) -> None:
    """Varint lengths past one byte (values of 200 and 20,000 bytes, offset deltas past
    63), null keys beside keys (one sticky partition for them), unicode and nesting."""
    records = [{"key": f"k{i % 9}", "value": "x" * (i * 97 % 300)} for i in range(150)]
    records += [
        {"value": {"nested": [1, {"deep": "é"}], "n": None}},
        {"key": "big", "value": "y" * 20_000},
    ]
    records += [{"key": None, "value": i} for i in range(5)]
    req = parse_produce_body(_body(records))
    fast = _plain_json_batches(req, partitions, lambda: partitions - 1, NOW)
    assert fast is not None
    builders, placed = fast
    expected, expected_placed = _expected(records, partitions, partitions - 1)
    assert {p: b.build() for p, b in builders.items()} == expected
    assert placed == expected_placed


def test_a_value_orjson_cannot_encode_goes_to_the_general_loop() -> None:
    """Nesting past orjson's encode depth: the general loop names the field."""
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    req = parse_produce_body(orjson.dumps({"records": [{"key": "a", "value": 1}]}))
    req = req._replace(records=[("a", 1, None, None, None), ("b", deep, None, None, None)])
    assert _plain_json_batches(req, 4, lambda: 0, NOW) is None
    with pytest.raises(Exception, match=r"body\.records\.1\.value"):
        build_batches(req, 4, None, lambda: 0, NOW)


@given(st.binary(max_size=64))
def test_native_murmur2_is_kafkas(data: bytes) -> None:
    if _jsonrecords is None:
        pytest.skip("app.common._jsonrecords is not built")
    assert _jsonrecords.murmur2(data) == murmur2(data)


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2**31), st.integers(-(2**63), 2**63 - 1)),
        max_size=20,
    ),
    st.lists(st.integers(0, 2**62), min_size=4, max_size=4),
)
def test_native_offsets_answer_is_orjsons(placed: list, firsts: list) -> None:
    """The produce answer's offsets rendered in C: orjson's bytes for the same dicts."""
    if _jsonrecords is None:
        pytest.skip("app.common._jsonrecords is not built")
    first = dict(enumerate(firsts))
    expected = orjson.dumps(
        [{"partition": p, "offset": first[p] + j, "timestamp": ts} for p, j, ts in placed]
    )
    assert _jsonrecords.offsets_json(placed, first) == expected
    assert orjson.dumps({"offsets": orjson.Fragment(expected)}) == b'{"offsets":' + expected + b"}"
