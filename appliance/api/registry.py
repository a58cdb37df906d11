"""The resources of the capabilities without their HTTP side, for code that runs them
in-process (the builder daemon: the Element Manager, repository sync and the bridge).

A capability registers itself the one way (`register(api)`), and this object takes that
registration as the API does, but keeps only the resources, the settings, the store and the
authenticator: a route is the HTTP mapping, and here there is none. Creating, updating and
deleting through a resource then runs the same validation and hooks as a request would,
without a route table, a Bottle application or the WSGI middleware in the process.
"""


class Registry:
    """What a capability's `register(api)` may use besides routes. The Api (routing.py)
    is this plus the HTTP side, so both carry the same attributes by construction."""

    def __init__(self, settings, store):
        self.settings = settings
        self.store = store
        store.configure_feed(settings.get("feed_keep_entries"),
                             settings.get("feed_keep_seconds"))
        self.resources = {}         # collection path -> Resource, for in-process use
        self.routes = ()            # what a capability may read back of its routes: none
        self.authenticate = None    # installed by IAM: request -> Principal, or raises 401
        # installed by IAM (its projects' quotas, appliance/tenancy/quotas.py): each has
        # guard(store, kind, project_id), a context manager held across a create or update
        # and its check, and check(store, settings, kind, before, after), which raises the
        # ApiError that refuses the write; Resource.create_record and update_record run them
        self.write_checks = []
        self.closers = []           # called by close(): threads a capability started
        # installed by the web console (appliance/console/): where GET / sends a browser
        self.browser_home = None

    def route(self, method, path, handler, **declaration):
        """A capability's route: the HTTP mapping, not kept here."""
        return None

    def close(self):
        for closer in self.closers:
            closer()
