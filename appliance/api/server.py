"""The API process: `python -m appliance.api.server` (settings from APPLIANCE_* variables)."""

import logging
import signal
import sys

import waitress

from appliance import config, logs
from appliance.api.app import create_app
from appliance.api.wsgi import body_limit, json_errors
from appliance.bootstrap import bootstrap


def serve(settings):
    log = logs.setup("api", settings["log_level"])
    # idempotent: the supervisor ran it already, but a unit may start the API alone
    log.info(bootstrap(settings))
    app, _ = create_app(settings)
    server = waitress.create_server(
        app, host=settings["api_host"], port=settings["api_port"],
        threads=settings["api_threads"], ident="appliance",
        max_request_body_size=body_limit(settings),
        clear_untrusted_proxy_headers=True,
        # poll(), not select(): select cannot watch a descriptor numbered 1024 or more,
        # which a busy API process reaches
        asyncore_use_poll=True)
    json_errors(server)
    signal.signal(signal.SIGTERM, lambda *_: server.close() or sys.exit(0))
    log.info("serving on http://%s:%s", settings["api_host"], server.effective_port)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return 0


def main():
    return serve(config.load())


if __name__ == "__main__":
    sys.exit(main())
