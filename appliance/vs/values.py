"""The current value of a variable, worked out from the store when it is read.

Nothing here writes. The API renders a variable's `value` with `variable_value`, and the
Element Manager resolves `$...variables.$x:value` links with the same function, so the
two can never disagree about what a variable holds.
"""

import copy

from state import order_key

PROFILES = "vs_profiles"
VARIABLES = "vs_variables"
VALUES = "vs_values"


class NoValue(LookupError):
    """A variable with `fallback_strategy: fail` lists no value for the active profile."""


def active_profile(store):
    """The active profile record, or None before the first start has seeded one."""
    active = store.collection(PROFILES).by("active", True)
    if not active:
        return None
    # activation writes both flags in one file write, so there is one; should a hand-edited
    # state file hold two, every reader still agrees on the same (the oldest)
    return dict(min(active, key=order_key))


def selector_value(store, variable_uuid):
    """The `value` of the value record chosen with `select_value`, else of the most
    recently created one bound to the variable (`latest`); None when none is bound."""
    bound = store.collection(VALUES).by("variable", variable_uuid)
    if not bound:
        return None
    chosen = [v for v in bound if v.get("manual_selected")] or bound
    return copy.deepcopy(max(chosen, key=order_key).get("value"))


def profile_value(store, variable):
    setter = variable["setter"]
    profile = active_profile(store)
    if profile is not None:
        for entry in setter.get("profiles") or ():
            if entry["profile"] == profile["uuid"]:
                return copy.deepcopy(entry["value"])
    if setter.get("fallback_strategy") == "fail":
        active = profile["name"] if profile else "(none)"
        raise NoValue(f"variable {variable.get('name')} ({variable['uuid']}) has no value "
                      f"for the active profile {active}")
    return None


def variable_value(store, variable):
    """The current value of a variable record. Raises NoValue when the variable has no
    value to give and says so (fallback_strategy fail)."""
    setter = variable.get("setter") or {}
    kind = setter.get("kind")
    if kind == "selector":
        return selector_value(store, variable["uuid"])
    if kind == "profile":
        return profile_value(store, variable)
    raise NoValue(f"variable {variable.get('name')} ({variable['uuid']}) has an unknown "
                  f"setter kind {kind!r}")
