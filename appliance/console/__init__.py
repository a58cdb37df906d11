"""The web console: its files served under /console/ and the browser's session (login,
project switch, logout) as cookies; the front end itself lives in static/
(docs/console.md). The API does everything else: the console is one more client of it."""

from appliance.capability import Capability

CAPABILITY = Capability(
    name="console",
    resources="appliance.console.session",
    preload=("appliance.console.files",),
    register="appliance.console:register",
    # the folder of the front end's files; unset: the package's static/ folder
    settings={"console_static_dir": None},
)


def register(api):
    # Imported here: reading the descriptor must not import the API (capabilities.py).
    from . import files, session
    files.register(api)
    session.register(api)
