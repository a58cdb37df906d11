"""The API process: `python -m appliance.server` (settings from APPLIANCE_* variables)."""

import gc
import logging
import os
import resource
import signal
import sys
import threading
import time

import waitress

from appliance import config, logs, metrics
from appliance.app import create_app, preload
from appliance.api import answers, longlived
from appliance.api.connection_guard import guard
from appliance.api.server_errors import body_limit, json_errors
from appliance.bootstrap import bootstrap, require_bootstrapped
from appliance.migrations import MigrationError


# descriptors kept for what is not a client connection: state files, locks, log files
RESERVED_DESCRIPTORS = 64
# how often waitress looks for silent connections: a small part of the shortest timeout, so
# that one is closed soon after its deadline, not up to a whole default interval (30 s) late
CLEANUP_FRACTION = 0.2


def raise_descriptor_limit():
    """Soft RLIMIT_NOFILE up to the hard one (a service often starts with a soft 1024).
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def waitress_settings(settings, descriptors=None):
    """Waitress's adjustments for the API, from the appliance settings: one function for
    the API process and its flood test, so that the two cannot drift apart.

    Idle connections cost a descriptor and no thread (waitress reads headers in its event
    loop), so the connection limit is high. What keeps one client's flood of idle or
    trickling connections from shutting others out is guard_connections, not the limit."""
    limit = settings["api_connection_limit"]
    if descriptors is not None and descriptors != resource.RLIM_INFINITY:
        limit = min(limit, max(1, descriptors - RESERVED_DESCRIPTORS))
    timeout = settings["api_channel_timeout"]
    # the shortest deadline decides how often they are checked
    shortest = min(timeout, settings["api_header_timeout"], settings["api_idle_timeout"])
    return {
        "host": settings["api_host"], "port": settings["api_port"],
        "threads": settings["api_threads"], "ident": "appliance",
        "max_request_body_size": body_limit(settings),
        "clear_untrusted_proxy_headers": True,
        # the image's nginx on loopback appends the client's address to X-Forwarded-For:
        # its last entry becomes REMOTE_ADDR, which login throttling keys on (docs/iam.md);
        # its X-Forwarded-Proto https becomes wsgi.url_scheme, which makes the web
        # console's cookies Secure (docs/console.md); from anyone else both are dropped
        "trusted_proxy": "127.0.0.1",
        "trusted_proxy_headers": {"x-forwarded-for", "x-forwarded-proto"},
        "trusted_proxy_count": 1,
        "connection_limit": limit,
        "channel_timeout": timeout,
        "cleanup_interval": max(1, round(shortest * CLEANUP_FRACTION)),
        # poll(), not select(): select cannot watch a descriptor numbered 1024 or more,
        # which a busy API process reaches
        "asyncore_use_poll": True,
    }


def guard_connections(server, settings):
    """The flood rules (appliance/api/connection_guard.py) on the API's Waitress server."""
    return guard(server, per_address=settings["api_connections_per_address"],
                 header_timeout=settings["api_header_timeout"],
                 idle_timeout=settings["api_idle_timeout"])


def wait_for(path, log, interval=0.1):
    """Load the application's code, then wait until `path` exists (api_wait_for): in the
    image, first boot's mark that it prepared the state at this boot. Until then the
    state directory may not even be the API's user's. No timeout here: the unit's start
    timeout bounds it, and a first boot that failed leaves the API failed, not serving
    an unprepared state."""
    preload()
    # the imports' objects live as long as the process: frozen now, while the API only
    # waits, so that the full collection after create_app walks only what came since
    # (under TCG that collection is on the boot's way to serving: docs/boot.md)
    gc.collect()
    gc.freeze()
    if not _exists(path):
        log.info("code loaded; waiting for %s", path)
        while not _exists(path):
            time.sleep(interval)


def _exists(path):
    """os.path.exists, but a mark the API may not see (permissions) fails loudly instead
    of being waited for in silence."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    return True


def stop_streams_then_exit(api, server, drain=1.0):
    """SIGTERM: event streams end with their `end` event (docs/events.md), which only this
    thread's loop can send, so the exit (SIGUSR1, handled here) comes from a thread once
    they are done, or after `drain` seconds."""
    events = getattr(api, "events", None)
    if events is None or not events.open:
        server.close()
        sys.exit(0)
    events.stop()

    def exit_when_drained():
        deadline = time.monotonic() + drain
        while events.open and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)     # the loop flushes what the streams wrote last
        os.kill(os.getpid(), signal.SIGUSR1)
    threading.Thread(target=exit_when_drained, daemon=True).start()


def serve(settings):
    # queued: request threads only enqueue their access lines (appliance/logs.py)
    log = logs.setup("api", settings["log_level"], queued=True)
    if settings["api_wait_for"]:
        wait_for(settings["api_wait_for"], log)
    # once the state is prepared (it may not be the API's user's before), and before any
    # metric is made: the API's values go to the files every process shares
    metrics.enable(settings["state_dir"])
    # idempotent: the supervisor ran it already, but a unit may start the API alone; the
    # image's unit skips it (api_bootstrap: first boot ran it just before)
    try:
        if settings["api_bootstrap"]:
            log.info(bootstrap(settings))
        else:
            require_bootstrapped(settings)
    except MigrationError as e:
        log.error("%s", e)             # a state newer than the code: never serve it
        logs.stop()
        return 1
    app, api = create_app(settings)
    # what start-up made lives as long as the process (code, routes, the store's records
    # as loaded): out of the collector's sight, so that a full collection walks only what
    # came later (20-50 ms for the ~60,000 objects of a fresh API, one request's p99)
    gc.collect()
    gc.freeze()
    descriptors = raise_descriptor_limit()
    adjustments = waitress_settings(settings, descriptors)
    if adjustments["connection_limit"] < settings["api_connection_limit"]:
        log.warning("api_connection_limit lowered to %s: the descriptor limit is %s",
                    adjustments["connection_limit"], descriptors)
    server = waitress.create_server(app, **adjustments)
    json_errors(server)
    guard_connections(server, settings)
    longlived.install(server)
    answers.install(server, api.answers)
    signal.signal(signal.SIGTERM, lambda *_: stop_streams_then_exit(api, server))
    signal.signal(signal.SIGUSR1, lambda *_: server.close() or sys.exit(0))
    log.info("serving on http://%s:%s", settings["api_host"], server.effective_port)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        # SIGTERM's sys.exit() comes through here too; the supervisor's child leaves with
        # os._exit(), which runs no atexit handler
        api.trail.close()           # the audit entries still queued are written
        metrics.flush()             # what the request threads counted since the last
        metrics.process_dead(os.getpid())
        logs.stop()
    return 0


def main():
    return serve(config.load())


if __name__ == "__main__":
    sys.exit(main())
