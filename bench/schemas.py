"""Schema-typed record codecs (app/common/schemas): encode and decode records/s per type
(Avro via fastavro, JSON Schema via jsonschema-rs, Protobuf via protobuf's upb), each
with Confluent's 5-byte framing and full validation, against orjson's dumps/loads of the
same records in the same run (the untyped JSON path's codec). Also the JSON Schema
validator choice: jsonschema-rs against the pure-Python jsonschema on the same records.

``python -m bench.schemas [--records N] [--rounds R]``; medians of R rounds. In-process,
one core: no broker, no network.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from app.common import schemas
from app.common.schemas import wire

AVRO = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "namespace": "bench",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "ms", "type": "long"},
            {"name": "score", "type": "double"},
            {"name": "ref", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)
JSON_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "user": {"type": "string"},
            "page": {"type": "string"},
            "ms": {"type": "integer"},
            "score": {"type": "number"},
            "ref": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["user", "page", "ms"],
    }
)
PROTO = """
syntax = "proto3";
package bench;
message Click {
  string user = 1;
  string page = 2;
  int64 ms = 3;
  double score = 4;
  optional string ref = 5;
  repeated string tags = 6;
}
"""


def records(n: int) -> list[dict[str, Any]]:
    rnd = random.Random(7)
    return [
        {
            "user": f"user-{rnd.randrange(10_000)}",
            "page": f"/p/{rnd.randrange(500)}",
            "ms": 1_700_000_000_000 + i,
            "score": rnd.random(),
            "ref": None if i % 3 else "https://example.com/",
            "tags": ["a", "bb"][: i % 3],
        }
        for i in range(n)
    ]


def _rate(
    fn: Callable[[list[Any]], object], make: Callable[[], list[Any]], rounds: int
) -> dict[str, Any]:
    """Records/s of ``fn`` over fresh inputs from ``make`` each round (built outside the
    timing): a str caches its UTF-8 form once a codec asked for it (jsonschema-rs does),
    so reused records made a later codec look faster than the first."""
    fn(make())  # warm-up: caches, allocator; not timed
    samples = []
    for _ in range(rounds):
        data = make()
        # The cyclic collector off while timing: 20,000 fresh records made its full
        # collections land at random in one codec's loop or another's (seen: orjson alone
        # at 0.3-3.5 M records/s from one round to the next).
        gc.collect()
        gc.disable()
        try:
            t = time.perf_counter()
            fn(data)
            samples.append(len(data) / (time.perf_counter() - t))
        finally:
            gc.enable()
    return {"median": round(statistics.median(samples)), "samples": [round(s) for s in samples]}


def run(n: int = 20_000, rounds: int = 5) -> dict[str, Any]:
    def fresh() -> list[dict[str, Any]]:
        return records(n)

    def fresh_proto() -> list[dict[str, Any]]:
        # Protobuf's dict form: no None for an unset optional.
        return [{k: v for k, v in r.items() if v is not None} for r in records(n)]

    out: dict[str, Any] = {"records": n, "rounds": rounds}
    plain = [orjson.dumps(r) for r in fresh()]
    out["orjson"] = {
        "encode": _rate(lambda rs: [orjson.dumps(r) for r in rs], fresh, rounds),
        "decode": _rate(lambda bs: [orjson.loads(b) for b in bs], lambda: list(plain), rounds),
        "bytes_per_record": round(sum(map(len, plain)) / n, 1),
    }
    for kind, text, make in (
        ("AVRO", AVRO, fresh),
        ("JSON", JSON_SCHEMA, fresh),
        ("PROTOBUF", PROTO, fresh_proto),
    ):
        parsed = schemas.parse(kind, text)
        framed = [wire.encode(parsed, 1, v) for v in make()]
        enc = _rate(lambda vs, p=parsed: [wire.encode(p, 1, v) for v in vs], make, rounds)
        dec = _rate(
            lambda fs, p=parsed: [wire.decode(p, f) for f in fs],
            lambda fs=framed: [bytes(f) for f in fs],
            rounds,
        )
        out[kind] = {
            "encode": enc,
            "decode": dec,
            "encode_vs_orjson": round(enc["median"] / out["orjson"]["encode"]["median"], 3),
            "decode_vs_orjson": round(dec["median"] / out["orjson"]["decode"]["median"], 3),
            "bytes_per_record": round(sum(map(len, framed)) / n, 1),
        }

    # One record, encoded/decoded 50,000 times (hot caches): the per-call cost without the
    # first touch of fresh memory, which dominated the loops above for orjson alone.
    import timeit

    one = fresh()[1]
    one_proto = {k: v for k, v in one.items() if v is not None}
    hot: dict[str, Any] = {
        "orjson_encode_ns": round(
            timeit.timeit(lambda: orjson.dumps(one), number=50_000) / 50_000 * 1e9
        )
    }
    blob = orjson.dumps(one)
    hot["orjson_decode_ns"] = round(
        timeit.timeit(lambda: orjson.loads(blob), number=50_000) / 50_000 * 1e9
    )
    for kind, text, value in (
        ("AVRO", AVRO, one),
        ("JSON", JSON_SCHEMA, one),
        ("PROTOBUF", PROTO, one_proto),
    ):
        parsed = schemas.parse(kind, text)
        framed = wire.encode(parsed, 1, value)
        hot[f"{kind}_encode_ns"] = round(
            timeit.timeit(lambda p=parsed, v=value: wire.encode(p, 1, v), number=50_000)
            / 50_000
            * 1e9
        )
        hot[f"{kind}_decode_ns"] = round(
            timeit.timeit(lambda p=parsed, f=framed: wire.decode(p, f), number=50_000)
            / 50_000
            * 1e9
        )
    out["hot_one_record"] = hot

    # The JSON Schema validator choice, same schema, same records.
    import jsonschema
    import jsonschema_rs

    doc = json.loads(JSON_SCHEMA)
    rs = jsonschema_rs.validator_for(doc)
    py = jsonschema.Draft7Validator(doc)
    out["json_validators"] = {
        "jsonschema_rs": _rate(lambda recs: [rs.validate(r) for r in recs], fresh, rounds),
        "jsonschema": _rate(
            lambda recs: [py.validate(r) for r in recs], fresh, max(1, rounds // 2)
        ),
    }
    v = out["json_validators"]
    v["ratio"] = round(v["jsonschema_rs"]["median"] / v["jsonschema"]["median"], 1)

    # Parse cost (what a registry pays per new schema; the registry caches parsed schemas).
    parse_times = {}
    for kind, text in (("AVRO", AVRO), ("JSON", JSON_SCHEMA)):
        t = time.perf_counter()
        for _ in range(200):
            schemas.parse(kind, text)
        parse_times[kind] = round((time.perf_counter() - t) / 200 * 1e3, 3)
    t = time.perf_counter()
    schemas.parse("PROTOBUF", PROTO + "// fresh\n")  # a text not in protoc's cache
    parse_times["PROTOBUF"] = round((time.perf_counter() - t) * 1e3, 1)
    out["parse_ms"] = parse_times
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.records, args.rounds), indent=2))


if __name__ == "__main__":
    main()
