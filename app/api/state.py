"""What one app instance holds between requests (``app.state.logbus``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from app.api.group_commit import GroupCommit
from app.api.inter_broker import InterBrokerHttp
from app.api.longpoll import FetchWaiters
from app.api.memory import BudgetCollector, MemoryBudget, default_budget_bytes
from app.api.rendered import RenderedBatches
from app.api.schema_validation import SchemaValidation
from app.common.errors import BrokerNotAvailable
from app.common.partitioner import StickyPartitioner
from app.config import Settings

if TYPE_CHECKING:
    from app.core.log.manager import LogManager
    from app.core.topology import Topology


@dataclass
class AppState:
    settings: Settings
    manager: LogManager | None
    owns_manager: bool
    ready: bool = False
    # Where partitions live and who leads them (app/core/topology.py): set by the
    # lifespan, a LocalTopology alone or the ReplicaManager in a cluster (a test may set
    # a stand-in before the lifespan runs); None before and after.
    _topology: Topology | None = None
    sticky: StickyPartitioner = field(default_factory=StickyPartitioner)
    waiters: FetchWaiters = field(default_factory=FetchWaiters)
    # Small produce requests to one partition share appends (app/api/group_commit.py).
    group_commit: GroupCommit = field(default_factory=GroupCommit)
    # Per-app metrics (partition offsets) live here, not in the process-wide
    # default registry, so tests that build many apps don't collide.
    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=False)
    )
    started_at: float = field(default_factory=time.time)
    # Broker-side schema validation (app/api/schema_validation.py): its registry is set
    # by the registry's lifespan; made in __post_init__ from the settings.
    schema_validation: SchemaValidation = field(init=False)
    # The broker-wide memory budget (app/api/memory.py), shared with the listener's
    # protocol (request bodies) by app.api.server.build_config.
    memory: MemoryBudget = field(init=False)
    # Rendered JSON records of recently fetched batches (app/api/rendered.py): the loop's.
    rendered: RenderedBatches = field(init=False)

    def __post_init__(self) -> None:
        self.rendered = RenderedBatches(self.settings.fetch_render_cache_bytes)
        self.memory = MemoryBudget(
            self.settings.memory_budget_bytes or default_budget_bytes(),
            self.settings.memory_wait_timeout_ms / 1000,
        )
        self.registry.register(BudgetCollector(self.memory))
        self.schema_validation = SchemaValidation(
            self.settings.schema_validation_cache_ms,
            self.settings.schema_validation_cache_subjects,
            # A broker without a _schemas replica asks the leader (its own call: it
            # presents this broker's certificate).
            InterBrokerHttp(self.settings),
            self.settings.schema_registry_write_timeout_ms,
        )

    @property
    def topology(self) -> Topology:
        if self._topology is None:
            raise BrokerNotAvailable("the broker is not serving yet (starting) or is stopping")
        return self._topology

    @topology.setter
    def topology(self, topology: Topology) -> None:
        self._topology = topology

    @property
    def has_topology(self) -> bool:
        return self._topology is not None

    def drop_topology(self) -> Topology | None:
        """Forget the topology (the lifespan stops it); the one held, if any."""
        topology, self._topology = self._topology, None
        return topology
