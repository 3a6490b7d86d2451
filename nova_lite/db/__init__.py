"""The record store: ``Store(url)`` on SQLite (default) or PostgreSQL."""

from nova_lite.db.services import COMPUTE_BINARY, ServiceRecord
from nova_lite.db.store import Store

__all__ = ["Store", "ServiceRecord", "COMPUTE_BINARY"]
