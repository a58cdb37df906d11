"""First start of the Values Store: the five global profiles, `develop` active.

Idempotent and safe from several processes at once: it runs under the profiles' kind
lock, adds only the profiles whose name is missing and makes `develop` active only when
no profile is. Run at every start, it never undoes an activation made since.
"""

from appliance.kinds import ADMIN_PROJECT

from .values import PROFILES, active_profile

PROFILE_NAMES = ("develop", "small", "medium", "large", "legacy")
DEFAULT_ACTIVE = "develop"


def seed(store):
    profiles = store.collection(PROFILES, unique=[("name",)])
    with profiles.lock:
        nobody_active = active_profile(store) is None
        missing = [name for name in PROFILE_NAMES if profiles.find_one(name=name) is None]
        if missing:
            # one write for every missing profile: a crash leaves all of them or none
            profiles.insert_many([{
                "name": name, "profile_type": "GLOBAL", "project_id": ADMIN_PROJECT,
                "description": f"The {name} profile",
                "active": nobody_active and name == DEFAULT_ACTIVE,
            } for name in missing])
        if nobody_active and DEFAULT_ACTIVE not in missing:
            # develop was there but nothing was active (it was created through the API
            # before this seed first ran): one write, and nothing else can be active
            develop = profiles.find_one(name=DEFAULT_ACTIVE)
            profiles.update(develop["uuid"], {"active": True})
