"""A node record with one more (or one less) allocation: a claim's effect, computed.

The arithmetic is the claim model's (:mod:`nova_lite.model.usage`), below
both the tracker and the store; its names are importable from here too.
"""

from nova_lite.model.usage import (  # noqa: F401 - public names here too
    synced, with_allocation)
