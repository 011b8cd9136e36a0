"""The typed Spark source's decode step, in-process (issue 18): Avro values in Confluent's
wire format to one Arrow struct column, as a task does per Arrow batch.

``python -m bench.spark_typed`` (hand-recorded in bench/RESULTS.md): ``ROWS`` values of
bench.typed_records' 5-field Order record (confluent-kafka-compatible framing, one schema
id, so no registry is asked), decoded by :class:`app.spark.typed.Decoder` (fastavro's
compiled reader per value, then one ``pyarrow.array`` call per batch); and, for scale,
fastavro's reader alone on the same values. Medians of ``rounds`` runs, ns per record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import pyarrow as pa

from app.common.schemas import wire
from app.spark.schemas import RegisteredSchema
from app.spark.typed import Decoder, TypedValues
from bench.common import machine
from bench.typed_records import SCHEMA, _values

ROWS = 100_000


def run(rounds: int = 5, rows: int = ROWS) -> dict[str, Any]:
    reader = RegisteredSchema(1, "AVRO", SCHEMA, (), "orders-value", 1)
    parsed = reader.parse()
    values = pa.array([wire.encode(parsed, 1, v) for v in _values(rows)], type=pa.binary())
    offsets = pa.array(range(rows), type=pa.int64())
    decoder = Decoder(TypedValues("avro", "http://unused", reader, fail_fast=True))
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        start = time.perf_counter()
        column, _, errors = decoder.column(values, ("orders", 0), offsets)
        figures.setdefault("decoder_ns_per_record", []).append(
            (time.perf_counter() - start) / rows * 1e9
        )
        assert errors.null_count == rows and len(column) == rows
        start = time.perf_counter()
        for data in values.to_pylist():
            parsed.decode_payload(memoryview(data)[5:])  # type: ignore[attr-defined]
        figures.setdefault("fastavro_read_ns_per_record", []).append(
            (time.perf_counter() - start) / rows * 1e9
        )
    result: dict[str, Any] = {k: statistics.median(v) for k, v in figures.items()}
    result["rows"] = rows
    result["rounds"] = rounds
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), **run(args.rounds, args.rows)}, indent=2, default=str))


if __name__ == "__main__":
    main()
