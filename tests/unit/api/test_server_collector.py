"""The served process settles its garbage collector once started (app/api/server.py).

Run in a child interpreter: freezing and thresholds are process-wide, and this test
process must keep its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import asyncio, gc, json, socket
from app.api.server import LogbusServer, build_config
from app.config import Settings

class Probe(LogbusServer):
    async def startup(self, sockets=None):
        before = (gc.get_freeze_count(), gc.get_threshold()[0])
        await super().startup(sockets)
        self.seen = {"before": before, "after": [gc.get_freeze_count(), gc.get_threshold()]}
        self.should_exit = True

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
settings = Settings(data_dir=sys_argv_dir, port=port, gc_young_threshold=threshold)
server = Probe(build_config(settings, log_level="warning"), settings.gc_young_threshold)
asyncio.run(server.serve())
print(json.dumps(server.seen))
"""


def _settle(tmp_path, threshold: int) -> dict:
    code = f"sys_argv_dir = {str(tmp_path)!r}; threshold = {threshold}\n" + CHILD
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_started_server_freezes_startup_objects_and_raises_young_threshold(tmp_path):
    seen = _settle(tmp_path, 12_345)
    assert seen["before"] == [0, 700]
    frozen, threshold = seen["after"]
    assert frozen > 10_000  # the app, routes and models built at startup
    assert threshold[0] == 12_345


def test_zero_threshold_keeps_python_default(tmp_path):
    seen = _settle(tmp_path, 0)
    assert seen["after"][0] > 10_000
    assert seen["after"][1][0] == 700
