"""Python's cyclic garbage collector and the records of a full read.

A view's full read (the scheduler's host view, the API's node cache)
builds a few long-lived objects per node: at 100,000 nodes, about a
million objects the cyclic collector tracks.  While they are built, the
collector's oldest generation runs again each time the tracked objects
grew by a quarter, each run walking all of them (seconds in all at
100,000 nodes); afterwards each of its runs walks them all again, however
few objects changed.  So, around a full read (:func:`full_read`):

- the collector is paused while the records are built (reference
  counting still frees what is dropped; only cycles wait);
- when the read kept at least :data:`FREEZE_RECORDS` records, every object
  then alive is moved out of the collector's sight (:func:`gc.freeze`):
  later runs walk only what was allocated since.  Frozen objects are still
  freed when their last reference goes; a reference cycle among them that
  becomes garbage is never collected, which is why small reads (tests,
  small fleets) do not freeze.
"""

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator

LOG = logging.getLogger(__name__)

#: A full read that kept at least this many node records freezes the heap.
FREEZE_RECORDS = 10_000


@contextlib.contextmanager
def full_read(active: bool, records: Callable[[], int]) -> Iterator[None]:
    """Around a view's refresh: when ``active`` (the refresh reads every
    node), the collector paused within, and, if the block ends normally
    with ``records()`` (the records the view now holds) at least
    :data:`FREEZE_RECORDS`, the heap frozen (see the module docstring).
    Nothing happens when not ``active`` or when the collector is already off
    (another thread's full read, or the application's own choice)."""
    if not active or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
    held = records()
    if held >= FREEZE_RECORDS:
        gc.freeze()
        LOG.debug("Froze the heap after a full read of %d records (%d objects frozen)",
                  held, gc.get_freeze_count())
