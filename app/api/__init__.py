"""The HTTP front door: ``create_app(settings)`` builds the FastAPI app."""

from app.api.app import create_app

__all__ = ["create_app"]
