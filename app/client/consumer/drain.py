"""Handing fetched records out: the part of ``poll`` that runs per record batch.

Pure over the partition states (no I/O, no clock): the shells call it with
the partitions in this poll's turn order.
"""

from __future__ import annotations

from app.client.consumer.records import (
    Decoded,
    RecordColumns,
    convert,
    decode_columns,
    decode_records,
    offset_at,
)
from app.client.consumer.state import PartitionState


def drain(states: list[PartitionState], max_records: int, columnar: bool) -> list[Decoded]:
    """Up to ``max_records`` decoded records as pieces in hand-out order, ``states`` in turn.

    Moves each partition's position past what it hands out, and past batches
    that hold nothing for it (control batches, records compacted away, records
    before the position); drops a ``fetched`` answer once it is used up.
    """
    out: list[Decoded] = []
    count = 0
    decode = decode_columns if columnar else decode_records
    for st in states:
        fetched = st.fetched
        while fetched is not None and count < max_records and st.position is not None:
            decoded = fetched.decoded
            if fetched.taken >= len(decoded):
                if fetched.next_batch >= len(fetched.batches):
                    # Past batches the answer held but does not hand out (read_committed).
                    st.position = max(st.position, fetched.end)
                    break
                pos, header = fetched.batches[fetched.next_batch]
                fetched.next_batch += 1
                fetched.taken = 0
                if header.last_offset < st.position or header.is_control:
                    decoded = []
                else:
                    # A view into the answer's buffer: the codec reads it in place.
                    data = fetched.data[pos : pos + header.size]
                    decoded = decode(st.tp.topic, st.tp.partition, data, header, st.position)
                fetched.decoded = decoded
                if not len(decoded):
                    # Past the batch even if it held nothing for us (control, compacted).
                    st.position = max(st.position, header.next_offset)
                    continue
            elif columnar != isinstance(decoded, RecordColumns):
                decoded = fetched.decoded = convert(decoded, columnar)
                if isinstance(decoded, RecordColumns):
                    decoded = fetched.decoded = decoded._slice(fetched.taken, len(decoded))
                else:
                    decoded = fetched.decoded = decoded[fetched.taken :]
                fetched.taken = 0
            n = min(max_records - count, len(decoded) - fetched.taken)
            if fetched.taken == 0 and n == len(decoded):
                piece = decoded
            elif isinstance(decoded, RecordColumns):
                piece = decoded._slice(fetched.taken, fetched.taken + n)
            else:
                piece = decoded[fetched.taken : fetched.taken + n]
            out.append(piece)
            count += n
            fetched.taken += n
            st.position = offset_at(piece, n - 1) + 1
            if fetched.taken >= len(decoded):
                last = fetched.batches[fetched.next_batch - 1][1]
                st.position = max(st.position, last.next_offset)
        if (
            fetched is not None
            and fetched.next_batch >= len(fetched.batches)
            and fetched.taken >= len(fetched.decoded)
        ):
            st.fetched = None
        if count >= max_records:
            break
    return out
