"""libvirt's events for the compute daemon (docs/compute-daemon.md, "Events"): a domain's
lifecycle event or a connection closing asks for a pass (`on_change`), so that a guest's
poweroff or a libvirtd restart is seen in milliseconds rather than at the next tick.
An event never decides a status: it only makes the next pass look again (`on_domain`
drops what the pass remembered of the domain's node), so a lost event costs one tick."""

import threading

from .virt import libvirt, log, reason


class Events:
    def __init__(self, on_change, on_domain):
        self.on_change = on_change      # called (any thread) when libvirt reports a change
        self.on_domain = on_domain      # called with the domain of a lifecycle event
        self.thread = None

    def start(self):
        """Run libvirt's default event loop in a thread, so that lifecycle events of
        every connection opened afterwards call `on_change`. Call before any connect."""
        if self.thread is not None or libvirt is None:
            return
        libvirt.virEventRegisterDefaultImpl()

        def loop():
            while True:
                libvirt.virEventRunDefaultImpl()
        self.thread = threading.Thread(target=loop, daemon=True, name="libvirt-events")
        self.thread.start()

    def watch(self, conn):
        """The connection's lifecycle and close callbacks, once the loop runs."""
        if self.thread is None or self.on_change is None:
            return

        def lifecycle(_conn, dom, event, detail, _opaque):
            log.debug("domain %s: lifecycle event %d/%d", dom.name(), event, detail)
            self.on_domain(dom)
            self.on_change()

        def closed(_conn, why, _opaque):
            log.warning("a libvirt connection closed (reason %d)", why)
            self.on_change()
        try:
            conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                        lifecycle, None)
            conn.registerCloseCallback(closed, None)
        except libvirt.libvirtError as e:
            log.warning("no libvirt events on this connection (%s): periodic passes only",
                        reason(e))
