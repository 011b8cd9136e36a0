"""Telling a core component's listeners about a change: :func:`notify`.

A listener is another layer's code (a coordinator, the WebSocket layer): a bug in one
must neither stop the component that tells it nor keep the others from hearing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable


def notify(
    listeners: Iterable[Callable[..., object]], *args: object, log: logging.Logger, what: str
) -> None:
    """Call every listener with ``args``, in order, on the caller's thread. The list is
    copied first (a listener may add or remove listeners); one that raises is logged on
    ``log`` as "``what`` failed for ``args``" and the next is called."""
    for listener in list(listeners):
        try:
            listener(*args)
        except Exception:
            log.exception("%s failed for %s", what, ", ".join(map(str, args)))
