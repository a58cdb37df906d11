"""Errors raised by the store. The API maps them to HTTP statuses."""


class StoreError(Exception):
    """Base class of every store error."""


class NotFound(StoreError):
    def __init__(self, kind, uuid):
        super().__init__(f"{kind} {uuid} not found")
        self.kind = kind
        self.uuid = uuid


class RevisionConflict(StoreError):
    """A compare-and-set write found another revision than the one expected."""

    def __init__(self, kind, uuid, expected, actual):
        super().__init__(f"{kind} {uuid} is at revision {actual}, not {expected}")
        self.kind = kind
        self.uuid = uuid
        self.expected = expected
        self.actual = actual


class DuplicateKey(StoreError):
    """A write would give two records the same value of a unique key."""

    def __init__(self, kind, fields, values, existing_uuid):
        pairs = ", ".join(f"{f}={v!r}" for f, v in zip(fields, values))
        super().__init__(f"a {kind} with {pairs} already exists ({existing_uuid})")
        self.kind = kind
        self.fields = fields
        self.values = values
        self.existing_uuid = existing_uuid


class StateInUse(StoreError):
    """An exclusive Store was asked for while other processes have the directory open."""

    def __init__(self, directory, pids):
        who = f" (process {', '.join(map(str, pids))})" if pids else ""
        super().__init__(f"the state directory {directory} is in use{who}: the appliance "
                         "is running; stop it first")
        self.directory = directory
        self.pids = pids
