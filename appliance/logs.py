"""One log format for every process: time, process name, level, message."""

import logging
import sys


def setup(name, level="INFO"):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {name}[%(process)d] %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # watchdog logs every inotify event at DEBUG: noise that drowns a daemon's own lines
    logging.getLogger("watchdog").setLevel(max(logging.INFO, logging.getLevelName(level)
                                               if isinstance(level, str) else level))
    return logging.getLogger(name)
