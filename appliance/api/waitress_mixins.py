"""How the API's additions to Waitress (the flood guard, the long-lived hand-over, the
kept answers) reach a running server: a mix-in class put in front of its channel class
and, where one is given, of the server's own class, each under a name that says so.
One way for all of them, so that their order of installation is the only thing that
differs."""


def mix_into(server, name, channel_mixin, server_mixin=None):
    """Put `channel_mixin` in front of `server`'s channel class and `server_mixin` (if
    any) in front of its class; a mix-in already there is not added twice."""
    channel_class = server.channel_class
    if not issubclass(channel_class, channel_mixin):
        server.channel_class = type(f"{name}{channel_class.__name__}",
                                    (channel_mixin, channel_class), {})
    if server_mixin is not None and not isinstance(server, server_mixin):
        server.__class__ = type(f"{name}{type(server).__name__}",
                                (server_mixin, type(server)), {})
    return server
