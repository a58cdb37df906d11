"""RSA keys stored as `bits` (the field's name before the reference's `bitness`) get `bitness`.

Reads used to translate such records on the fly; after this migration every stored RSA key
has `bitness` and no `bits`, so nothing has to. Idempotent: a record already migrated has no
`bits` and is left alone.
"""

KIND = "secret_rsa_keys"


def _renamed(record):
    record = dict(record)
    bits = record.pop("bits")
    if record.get("bitness") is None:
        record["bitness"] = bits
    return record


def apply(store):
    keys = store.collection(KIND)
    for record in keys.records():
        if "bits" in record:
            keys.mutate(record["uuid"], _renamed)
