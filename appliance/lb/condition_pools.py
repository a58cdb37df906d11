"""What a stored route condition names, read without its schema: the LB's producer
(targets.py) runs in the status daemon, which must not load the API's validation
(tests/supervisor/test_imports.py), as conditions.py does to check bodies."""


def pools(condition):
    """Uuids of the backend pools a condition names (backend actions, auth_request)."""
    named = [a["pool"] for a in condition.get("actions") or () if a["kind"] == "backend"]
    named += [m["pool"] for m in condition.get("modifiers") or ()
              if m["kind"] == "auth_request"]
    return list(dict.fromkeys(named))
