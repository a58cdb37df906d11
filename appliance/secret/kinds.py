"""The four secret kinds as the delivery daemon needs them: their data-plane folder, their
sealed fields, the value each delivers and their status life cycle. Kept apart from resources.py so that the
daemon does not load the API framework (bottle, jsonschema, every field: ~10 MB of an
idle process); tests/secret/test_delivery_kinds.py checks it against the resources."""

STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
# every write of a record returns it to NEW, and so does the withdrawal of a value that is
# no longer there to deliver; the delivery daemon moves it on to IN_PROGRESS, then ACTIVE
# or ERROR
UNDELIVERED = {"status": "NEW", "status_reason": None}


def is_undelivered(record):
    return record.get("status") == "NEW" and not record.get("status_reason")


# kind -> (folder under <data plane>/secret/, fields sealed in the store)
KINDS = {
    "secret_secrets": ("secrets", ("value", "default_value")),
    "secret_passwords": ("passwords", ("value",)),
    "secret_ssh_keys": ("ssh_keys", ("private_key",)),
    "secret_rsa_keys": ("rsa_keys", ("private_key",)),
}


def effective_value(kind, record):
    """What a kind delivers to the data plane, from an opened record."""
    if kind == "secret_secrets":
        return record.get("value") if record.get("value") is not None else record.get(
            "default_value")
    if kind == "secret_passwords":
        return record.get("value")
    return record.get("private_key")
