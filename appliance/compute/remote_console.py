"""The serial consoles of a remote hypervisor's guests, copied to the appliance.

A local domain's serial console is a file that libvirt appends to under the appliance's
state directory (console.py), and the API's `console` action reads it. A domain on
another machine cannot write there: its console is a pty on that machine (domains.py), so
its node's console answered "". Now the compute daemon holds one console stream for each
running domain of ours on a `qemu+ssh` hypervisor (virDomainOpenConsole over the
connection the pass already has: the same pinned SSH transport, nothing new to open on
the host) and appends what arrives to the node's console file: the API, the CLI's
`--follow` and the web console read it as they read a local node's.

Streams are driven by libvirt's event loop (events.py): no thread per console, and a
stream that ends (the guest stopped, the connection closed) is dropped in its callback,
then opened again by the next pass that finds the domain running. What the guest printed
while no stream was open (from its start to the end of the pass that started it, or
while its hypervisor did not answer) is not in the file: the pty keeps nothing for a
reader that is not there.
"""

import os
import threading

from .virt import libvirt, log, reason

CHUNK = 64 * 1024
_EVENTS = 0 if libvirt is None else (libvirt.VIR_STREAM_EVENT_READABLE
                                     | libvirt.VIR_STREAM_EVENT_ERROR
                                     | libvirt.VIR_STREAM_EVENT_HANGUP)


class RemoteConsoles:
    def __init__(self, console_dir, events_running):
        self.console_dir = console_dir
        self.events_running = events_running    # () -> whether libvirt's event loop runs
        self._lock = threading.Lock()
        self._open = {}         # node uuid -> (hypervisor uuid, domain UUID, stream)
        self._refused = set()   # (hypervisor uuid, domain UUID) whose driver said no

    def follow(self, hv, conn, ours):
        """(the pass) Open a stream for each running domain in `ours` ({node uuid: domain}
        of the hypervisor's domains of ours) that has none; close those of this hypervisor
        whose domain is gone or stopped."""
        if not self.events_running():
            return
        running = {d.UUIDString() for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
        wanted = {node: dom for node, dom in ours.items() if dom.UUIDString() in running}
        with self._lock:
            for node, (hv_uuid, dom_uuid, _stream) in list(self._open.items()):
                if hv_uuid == hv["uuid"] and (node not in wanted
                                              or wanted[node].UUIDString() != dom_uuid):
                    self._close(node)
            for node, dom in wanted.items():
                key = (hv["uuid"], dom.UUIDString())
                if node not in self._open and key not in self._refused:
                    self._attach(conn, node, dom, key)

    def forget_hypervisor(self, hv_uuid):
        """Its connection was dropped: its streams went with it."""
        with self._lock:
            for node, (owner, _dom, _stream) in list(self._open.items()):
                if owner == hv_uuid:
                    self._close(node)
            self._refused = {key for key in self._refused if key[0] != hv_uuid}

    def following(self):
        with self._lock:
            return set(self._open)

    def _attach(self, conn, node, dom, key):
        stream = conn.newStream(libvirt.VIR_STREAM_NONBLOCK)
        try:
            # FORCE: the appliance owns the domain; a console left open by an earlier
            # daemon (killed before it could close it) would otherwise refuse us
            dom.openConsole(None, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
            stream.eventAddCallback(_EVENTS, self._on_event, node)
        except libvirt.libvirtError as e:
            log.info("node %s: its console cannot be followed on this hypervisor (%s)",
                     node, reason(e))
            self._refused.add(key)
            _abort(stream)
            return
        self._open[node] = (key[0], key[1], stream)
        log.debug("node %s: following its console on hypervisor %s", node, key[0])

    def _on_event(self, stream, events, node):
        """(libvirt's event loop) Append what the stream has; drop it once it ends."""
        ended = bool(events & (libvirt.VIR_STREAM_EVENT_ERROR
                               | libvirt.VIR_STREAM_EVENT_HANGUP))
        chunks = []
        while True:
            try:
                data = stream.recv(CHUNK)
            except libvirt.libvirtError:
                ended = True
                break
            if data == -2:          # nothing more for now
                break
            if not data:            # the other end closed it
                ended = True
                break
            chunks.append(data)
        if chunks:
            self._append(node, b"".join(chunks))
        if ended:
            with self._lock:
                current = self._open.get(node)
                if current is not None and current[2] is stream:
                    self._close(node)

    def _append(self, node, data):
        path = os.path.join(self.console_dir, f"{node}.log")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            log.warning("node %s: its console could not be written to %s: %s", node, path, e)

    def _close(self, node):
        """(lock held)"""
        _hv, _dom, stream = self._open.pop(node)
        try:
            stream.eventRemoveCallback()
        except libvirt.libvirtError:
            pass
        _abort(stream)


def _abort(stream):
    try:
        stream.abort()
    except libvirt.libvirtError:
        pass
