"""The record store: ``Store(url)`` on SQLite (default) or PostgreSQL."""

from nova_lite.db.store import COMPUTE_BINARY, ServiceRecord, Store

__all__ = ["Store", "ServiceRecord", "COMPUTE_BINARY"]
