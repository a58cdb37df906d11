"""Where a node's serial console is written and how much of it the API shows: the compute
daemon points libvirt's `<serial type='file'>` at console_path, the API's `console` action
reads its tail from the same place. No import of the API framework (the daemon imports it).

A client follows the log by asking again from the `next_offset` of the last answer
(`?offset=N`, in bytes): each answer carries at most CONSOLE_TAIL bytes, so a reader far
behind catches up over several asks, and nothing is held open (docs/compute.md,
"Following the console")."""

import os

CONSOLE_TAIL = 64 * 1024


def console_dir(settings):
    return os.path.join(settings["state_dir"], "compute", "console")


def console_path(settings, node_uuid):
    """Where the daemon's libvirt `<serial type='file'>` writes a node's console."""
    return os.path.join(console_dir(settings), f"{node_uuid}.log")


def read_from(path, offset=None, limit=CONSOLE_TAIL):
    """{log, offset, next_offset, size, reset}: without `offset`, the log's tail (as
    `tail`); with it, at most `limit` bytes from byte `offset`. An offset past the end
    means the log was started anew (the node was made again): the answer starts at 0
    with `reset` true. A chunk cut inside a UTF-8 character ends before it, so that the
    next ask decodes it whole."""
    reset = False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset is None:
                start = max(0, size - limit)
            elif offset > size:
                start, reset = 0, True
            else:
                start = offset
            f.seek(start)
            data = f.read(limit)
    except FileNotFoundError:
        size, start, data = 0, 0, b""
        reset = bool(offset)
    if start + len(data) < size:
        data = data[:_complete_utf8(data)]
    return {"log": data.decode("utf-8", errors="replace"), "offset": start,
            "next_offset": start + len(data), "size": size, "reset": reset}


def _complete_utf8(data):
    """The length of `data` without an incomplete UTF-8 character at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:             # the last character's first byte
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else \
                3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return len(data) if need <= back else len(data) - back
    return len(data)


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
