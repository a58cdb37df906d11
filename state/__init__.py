"""The file-backed store: the only code that touches state files."""

from .collection import (BOOKKEEPING, Collection, format_time, observe_writes, order_key,
                         parse_time, utcnow, writes_in_thread)
from .errors import DuplicateKey, NotFound, RevisionConflict, StoreError
from .store import Store

__all__ = ["BOOKKEEPING", "ChangeWatch", "Collection", "DuplicateKey", "NotFound",
           "RevisionConflict", "Store", "StoreError", "format_time", "observe_writes", "order_key",
           "parse_time", "utcnow", "writes_in_thread"]


def __getattr__(name):
    # watchdog (inotify through ctypes, subprocess...) is loaded by the processes that
    # watch, the daemons; the API and first boot, which never do, start without it
    if name == "ChangeWatch":
        from .watch import ChangeWatch
        return ChangeWatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
