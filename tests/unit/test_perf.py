"""``logbus perf`` pieces that need no broker: percentiles, pacing, options, output."""

from __future__ import annotations

import time

import pytest

from app.cli import build_parser
from app.perf import (
    DEFAULT_THROUGHPUT_E2E,
    UNPACED_STEP,
    Pacer,
    _options,
    _text_summary,
    payload,
    percentile,
    progress_bar,
    summarize,
)


def test_percentiles_are_nearest_rank_and_ordered() -> None:
    values = [float(i) for i in range(1, 1001)]
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000
    assert percentile([7.0], 99.9) == 7.0
    assert percentile([], 50) == 0.0
    s = summarize(list(reversed(values)))
    assert (s.count, s.avg, s.max) == (1000, 500.5, 1000)
    assert s.p50 <= s.p95 <= s.p99 <= s.p999 <= s.max
    assert summarize([]).as_dict()["max"] == 0.0


def test_pacer_sleeps_per_step_until_the_schedule() -> None:
    now = [100.0]
    pacer = Pacer(1000, clock=lambda: now[0])
    assert pacer.step == 5  # 5 ms worth of records at 1,000/s
    slept: list[float] = []
    real_sleep = time.sleep
    try:
        time.sleep = slept.append  # type: ignore[assignment]
        pacer.wait(5)  # 5 records are due at +5 ms
        now[0] += 0.010  # late: no sleep
        pacer.wait(10)
    finally:
        time.sleep = real_sleep
    assert slept == [pytest.approx(0.005)]


def test_unlimited_pacer_never_sleeps() -> None:
    pacer = Pacer(-1, clock=lambda: 0.0)
    assert pacer.step == UNPACED_STEP
    pacer.wait(10**9)  # would sleep for ages if it paced
    assert Pacer(1_000_000_000).step == UNPACED_STEP


def test_payload_is_deterministic_letters() -> None:
    assert len(payload(100)) == 100
    assert payload(50) == payload(50)
    assert payload(64).isalpha()


def test_parser_and_options() -> None:
    args = build_parser().parse_args(
        ["perf", "produce", "--url", "http://b:1", "--topic", "t", "--records", "10",
         "--batch-size", "65536", "--linger-ms", "2", "--acks", "all", "--compression", "lz4"]
    )  # fmt: skip
    opts = _options(args)
    assert (opts.url, opts.topic, opts.records, opts.throughput) == ("http://b:1", "t", 10, -1)
    config = opts.producer_config()
    assert config["batch_size"] == 65536 and config["linger_ms"] == 2
    assert config["acks"] == "all" and config["compression"] == "lz4"
    # e2e: a 10,000/s cap and no linger unless asked.
    e2e = _options(build_parser().parse_args(["perf", "e2e", "--topic", "t", "--records", "5"]))
    assert e2e.throughput == DEFAULT_THROUGHPUT_E2E
    assert e2e.producer_config(default_linger_ms=0)["linger_ms"] == 0
    assert "batch_size" not in e2e.producer_config()
    assert not e2e.e2e_same_process  # the producer gets a process of its own by default
    same = ["perf", "e2e", "--topic", "t", "--records", "5", "--same-process"]
    assert _options(build_parser().parse_args(same)).e2e_same_process
    with pytest.raises(SystemExit):
        build_parser().parse_args(["perf", "produce", "--topic", "t", "--records", "0"])


def test_progress_is_silent_when_disabled(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_bar(False, 10, "produce") as advance:
        advance(10)
    assert capsys.readouterr() == ("", "")


def test_text_summary() -> None:
    line = _text_summary(
        {"mode": "e2e", "records": 10, "received": 10, "records_per_s": 5.0, "mb_per_s": 0.1,
         "elapsed_s": 2.0, "lost": 0, "duplicates": 0,
         "latency_ms": {"avg": 1, "p50": 1, "p95": 2, "p99": 3, "p999": 4, "max": 5}}
    )  # fmt: skip
    assert line.startswith("10 records received, 5.0 records/s")
    assert "p99.9 4.00" in line and "lost 0" in line
