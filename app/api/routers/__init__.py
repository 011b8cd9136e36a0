"""One router per resource."""

from app.api.routers import fetch, health, metadata, offsets, producers, records, topics

ALL = (
    health.router,
    metadata.router,
    topics.router,
    records.router,
    fetch.router,
    offsets.router,
    producers.router,
)

__all__ = ["ALL"]
