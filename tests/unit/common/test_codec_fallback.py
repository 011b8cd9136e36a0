"""The record codec's one import site falls back to aiokafka's pure-Python classes.

A platform where aiokafka's wheel has no compiled extension still works: the same batch
bytes are built and decoded (``AIOKAFKA_NO_EXTENSIONS=1`` makes aiokafka pick its Python
classes, as a missing extension does).
"""

from __future__ import annotations

import os
import subprocess
import sys

from app.common.batch import BatchBuilder, RecordBatchReader, decode_records

SCRIPT = """
import sys
from app.common.batch import BatchBuilder, RecordBatchReader, decode_records
print(RecordBatchReader.__module__)
b = BatchBuilder(compression="gzip")
for i in range(50):
    b.append(f"v{i}".encode(), key=f"k{i}".encode(), headers=[("h", b"x")], timestamp=1000 + i)
data = b.build()
sys.stdout.write(data.hex() + "\\n")
print([(r.offset, r.key, r.value) for r in decode_records(bytes.fromhex(sys.argv[1]))][-1])
"""


def _built_here() -> bytes:
    b = BatchBuilder(compression="gzip")
    for i in range(50):
        b.append(f"v{i}".encode(), key=f"k{i}".encode(), headers=[("h", b"x")], timestamp=1000 + i)
    return b.build()


def test_pure_python_codec_reads_and_writes_what_the_compiled_one_does() -> None:
    compiled = _built_here()
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, compiled.hex()],
        env={**os.environ, "AIOKAFKA_NO_EXTENSIONS": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "_crecords" not in out[0] and "_crecords" in RecordBatchReader.__module__
    python_built = bytes.fromhex(out[1])
    # Both decode both (gzip output may differ in bytes, never in records).
    assert [(r.offset, r.key, r.value, r.headers) for r in decode_records(python_built)] == [
        (r.offset, r.key, r.value, r.headers) for r in decode_records(compiled)
    ]
    assert out[2] == "(49, b'k49', b'v49')"
