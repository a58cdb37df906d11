"""The file-backed store: the only code that touches state files."""

from .collection import (BOOKKEEPING, Collection, format_time, order_key, parse_time, utcnow,
                         writes_in_thread)
from .errors import DuplicateKey, NotFound, RevisionConflict, StoreError
from .store import Store
from .watch import ChangeWatch

__all__ = ["BOOKKEEPING", "ChangeWatch", "Collection", "DuplicateKey", "NotFound",
           "RevisionConflict", "Store", "StoreError", "format_time", "order_key",
           "parse_time", "utcnow", "writes_in_thread"]
