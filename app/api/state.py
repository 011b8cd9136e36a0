"""What one app instance holds between requests (``app.state.logbus``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from app.api.longpoll import FetchWaiters
from app.common.partitioner import StickyPartitioner
from app.config import Settings

if TYPE_CHECKING:
    from app.core.log.manager import LogManager
    from app.core.replication.manager import ReplicaManager


@dataclass
class AppState:
    settings: Settings
    manager: LogManager | None
    owns_manager: bool
    ready: bool = False
    # Cluster mode (settings.zookeeper): partition leadership, ISR, metadata; None alone.
    cluster: ReplicaManager | None = None
    sticky: StickyPartitioner = field(default_factory=StickyPartitioner)
    waiters: FetchWaiters = field(default_factory=FetchWaiters)
    # Per-app metrics (partition offsets) live here, not in the process-wide
    # default registry, so tests that build many apps don't collide.
    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=False)
    )
    started_at: float = field(default_factory=time.time)
