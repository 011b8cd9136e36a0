"""CLI pieces that need no broker: stdin batching, line parsing, argument checks."""

from __future__ import annotations

import os
import threading
import time
from typing import BinaryIO

import pytest

from app.cli import CliError, _parse_configs, _record, build_parser, read_line_batches


def _pipe() -> tuple[BinaryIO, int]:
    read_fd, write_fd = os.pipe()
    return os.fdopen(read_fd, "rb"), write_fd


def test_full_batches_from_a_pipe_and_the_unterminated_last_line() -> None:
    reader, write_fd = _pipe()
    os.write(write_fd, b"".join(b"line %d\n" % i for i in range(25)) + b"tail")
    os.close(write_fd)
    batches = list(read_line_batches(reader, max_lines=10))
    assert [len(b) for b in batches] == [10, 10, 6]
    assert batches[0][0] == b"line 0"
    assert batches[-1][-1] == b"tail"


def test_a_pause_in_input_sends_what_was_typed() -> None:
    """An interactive producer's line goes out after the linger, not at EOF."""
    reader, write_fd = _pipe()
    got: list[tuple[float, list[bytes]]] = []
    start = time.monotonic()

    def consume() -> None:
        for batch in read_line_batches(reader, max_lines=1000, linger=0.02):
            got.append((time.monotonic() - start, batch))

    thread = threading.Thread(target=consume)
    thread.start()
    os.write(write_fd, b"first\n")
    time.sleep(0.5)
    os.write(write_fd, b"second\n")
    os.close(write_fd)
    thread.join(timeout=5)
    assert [batch for _, batch in got] == [[b"first"], [b"second"]]
    assert got[0][0] < 0.4


def test_record_keys_and_text() -> None:
    assert _record(b"k\tv\tw\r", 1, "\t") == {"key": "k", "value": "v\tw"}
    assert _record(b"no separator", 1, "\t") == {"value": "no separator"}
    assert _record(b"a\tb", 1, None) == {"value": "a\tb"}
    with pytest.raises(CliError, match="line 7 is not UTF-8"):
        _record(b"\xff", 7, None)


def test_config_pairs() -> None:
    assert _parse_configs(["retention.ms=1000", " cleanup.policy = compact"]) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    with pytest.raises(CliError):
        _parse_configs(["oops"])


def test_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGBUS_URL", "http://broker:9999")
    args = build_parser().parse_args(["topics", "list"])
    assert args.url == "http://broker:9999"
    args = build_parser().parse_args(["topics", "list", "--url", "http://other:1"])
    assert args.url == "http://other:1"
