"""The producer's optional C extension (everything else is in pyproject.toml).

``app.client.producer._native`` (app/client/producer/_native.c) does ``send``'s
per-record work; ``pip install`` / ``make install`` compile it with the
machine's C compiler and Python headers. ``optional=True``: where it cannot be
built, installing still succeeds and the producer uses its pure-Python path
(app/client/producer/_speedups.py), the same behaviour at a lower rate.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "app.client.producer._native",
            sources=["app/client/producer/_native.c"],
            include_dirs=["app/common"],  # _kafka_wire.h, shared
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # The broker's JSON produce loop (app/common/_jsonrecords.c); optional the same way:
        # without it, app/api/routers/records.py keeps its Python loop.
        Extension(
            "app.common._jsonrecords",
            sources=["app/common/_jsonrecords.c"],
            include_dirs=["app/common"],  # _kafka_wire.h, shared
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # A typed (Avro) produce's per-value encode (app/common/schemas/_avroenc.c); optional
        # the same way: without it, the generated Python encoder (_avro_fast.py) encodes.
        Extension(
            "app.common.schemas._avroenc",
            sources=["app/common/schemas/_avroenc.c"],
            depends=["app/common/schemas/_avroprogram.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # A typed (Avro) fetch's per-record decode (app/common/schemas/_avrodec.c, over the
        # encoder's program: _avroprogram.h); optional the same way: without it, fastavro's
        # compiled reader decodes.
        Extension(
            "app.common.schemas._avrodec",
            sources=["app/common/schemas/_avrodec.c"],
            depends=["app/common/schemas/_avroprogram.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
