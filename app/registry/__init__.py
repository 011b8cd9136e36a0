"""The schema registry: Confluent Schema Registry's rules over the compacted topic
``_schemas`` (transport-neutral; its REST API is ``app/api/routers/schema_registry.py``).

One module per concept: ``records`` (the topic's keys and values, Confluent's layout),
``store`` (the state rebuilt from them), ``storage`` (the topic over the broker's
topology), ``config`` (compatibility levels and modes, the service's limits) and
``service`` (the rules, and the cluster's read/write rule).
"""

from app.registry.config import RegistryConfig
from app.registry.service import SchemaRegistry

__all__ = ["RegistryConfig", "SchemaRegistry"]
