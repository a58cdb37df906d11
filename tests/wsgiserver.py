"""A WSGI app on a real Waitress server on a loopback port, in a thread of the test process,
started and stopped without races.

Waitress's `close()` called from another thread while its loop is in select() closes file
descriptors under it, and worker threads finishing a request afterwards still write to the
closed trigger: that descriptor number, reused by the next server's socket, then carries
stray bytes and stalls an unrelated request (seen as 30 s timeouts late in long runs). So
the loop here polls in short steps, and on stop it is the loop thread itself that drains
the workers and closes every socket.
"""

import threading

import waitress

POLL_SECONDS = 0.05


class LoopbackServer:
    def __init__(self, app, port=0, threads=4, host="127.0.0.1", **adjustments):
        # poll(), not select(): select cannot watch a descriptor numbered 1024 or more
        self.server = waitress.create_server(app, host=host, port=port, threads=threads,
                                             asyncore_use_poll=True, **adjustments)
        self.host = host
        self.port = self.server.effective_port
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"waitress-{self.port}")

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        server = self.server
        while not self._stopping.is_set() and server._map:
            server.asyncore.loop(timeout=POLL_SECONDS, map=server._map, count=1,
                                 use_poll=server.adj.asyncore_use_poll)
        server.task_dispatcher.shutdown(timeout=5)    # workers finish; the trigger is open
        for channel in list(server._map.values()):
            channel.close()

    def stop(self):
        self._stopping.set()
        self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
