"""Where a node's serial console is written and how much of it the API shows: the compute
daemon points libvirt's `<serial type='file'>` at console_path, the API's `console` action
reads its tail from the same place. No import of the API framework (the daemon imports it)."""

import os

CONSOLE_TAIL = 64 * 1024


def console_dir(settings):
    return os.path.join(settings["state_dir"], "compute", "console")


def console_path(settings, node_uuid):
    """Where the daemon's libvirt `<serial type='file'>` writes a node's console."""
    return os.path.join(console_dir(settings), f"{node_uuid}.log")


def tail(path):
    """The last CONSOLE_TAIL bytes of the log at `path` as text ("" before there is one)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - CONSOLE_TAIL))
            data = f.read(CONSOLE_TAIL)
    except FileNotFoundError:
        data = b""
    return data.decode("utf-8", errors="replace")
