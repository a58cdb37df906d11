"""Free ports on loopback for the tests' servers, never the same one twice in a run.

Why one place: a port is free when it is asked for and bound a moment later, often by
another process (the API under `appliance up`, Pebble, nginx, QEMU). Two asks before
either binds may get the same port from the kernel: a README walkthrough's API port went
to Pebble, asked for just after it, and the API could never bind. Remembering every port
this process handed out rules that out among the tests' own servers; what is left is
another program taking the port in between, which the callers' retries cover.
"""

import socket
import threading

_given = set()
_lock = threading.Lock()


def _bindable(address, kind, port):
    with socket.socket(socket.AF_INET, kind) as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address="127.0.0.1", kind=socket.SOCK_STREAM, also=()):
    """A port free now on `address` for `kind`, and on each (address, kind) of `also`,
    that this process has not handed out before."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind((address, 0))
            port = s.getsockname()[1]
        with _lock:
            if port in _given or not all(_bindable(a, k, port) for a, k in also):
                continue
            _given.add(port)
            return port
    raise RuntimeError(f"no free port on {address}")
