"""Freezing a test's server process: SIGSTOP, then wait until the kernel has stopped it."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def freeze(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGSTOP ``proc`` and return once every one of its threads is stopped.

    ``kill`` only queues the signal: a thread busy on a core (or waiting for one on a
    loaded host) still runs until the kernel delivers it, so a check made right after
    the signal could see the server answer. Waiting on ``/proc/PID/task/*/stat`` makes
    "paused" mean paused.
    """
    proc.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_stopped(stat) for stat in tasks.glob("*/stat")):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {proc.pid} not stopped {timeout} s after SIGSTOP")


def _stopped(stat: Path) -> bool:
    try:
        # The state follows the parenthesized command name: "pid (comm) S ...".
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return True  # a thread that ended is not running either
