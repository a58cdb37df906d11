"""The stop race of an idle daemon, made to happen every time (test_idle_stop.py).

`python -m tests.supervisor.idle_racer STATE_DIR` runs the supervisor of appliance/supervisor.py
with one child, the daemon `racer` below, which stops when idle after 0.3 s. The first
instance, right after it decided to stop (its idle record is taken: every write before it
was reconciled), writes a record to its own kind, as the API would while it stops: no
instance reconciles that record unless the supervisor starts the daemon again. Each
reconcile appends the uuids it saw to STATE_DIR/handled, one line each; each start appends
its pid to STATE_DIR/starts.

In the image's mode (APPLIANCE_IDLE_WAKE=marks: no supervisor, systemd's path unit starts it
again at its wake mark, state/wake.py), `python -m tests.supervisor.idle_racer marks
before|after` runs the daemon alone, as its unit does: `before` writes right after it
decided to stop and before it sleeps on its kind (it must see the write and stay),
`after` right after it slept (it stops, and the write leaves its mark).
"""

import os
import sys

from appliance import config, daemon_state, logs
from appliance.supervisor import Child, Supervisor, install_stop_signals
from daemons.base import Daemon, run

KIND = "race_items"


class Racer(Daemon):
    name = "racer"
    kinds = (KIND,)

    def start(self):
        with open(os.path.join(self.settings["state_dir"], "starts"), "a") as f:
            f.write(f"{os.getpid()}\n")
        return super().start()

    def reconcile(self, kind):
        with open(os.path.join(self.settings["state_dir"], "handled"), "a") as f:
            for record in self.store.collection(KIND).records():
                f.write(record["uuid"] + "\n")

    def _idle_record(self, now):
        record = super()._idle_record(now)
        marker = os.path.join(self.settings["state_dir"], "raced")
        if record is not None and not os.path.exists(marker):
            written = self.store.collection(KIND).insert({"name": "written while stopping"})
            with open(marker, "w") as f:
                f.write(written["uuid"])
        return record


class SleptRacer(Racer):
    """Writes right after it went to sleep on its kind, as the API would while it exits."""

    def _idle_record(self, now):
        return Daemon._idle_record(self, now)

    def _sleep(self, record):
        asleep = super()._sleep(record)
        marker = os.path.join(self.settings["state_dir"], "raced")
        if asleep and not os.path.exists(marker):
            written = self.store.collection(KIND).insert({"name": "written while asleep"})
            with open(marker, "w") as f:
                f.write(written["uuid"])
        return asleep


def main():
    return run(Racer)


def supervise(state_dir):
    settings = config.load(environ={}, overrides={"state_dir": state_dir})
    logs.setup("supervisor", "INFO")
    daemon_state.clear(state_dir)
    supervisor = Supervisor(settings)
    supervisor.children = [Child("racer", "tests.supervisor.idle_racer")]
    supervisor.idle_seconds = 0.3
    supervisor.on_demand = {"racer"}
    install_stop_signals(supervisor)
    return supervisor.run()


if __name__ == "__main__":
    if sys.argv[1] == "marks":
        import daemons
        daemons.ON_DEMAND["racer"] = (KIND,)
        sys.exit(run({"before": Racer, "after": SleptRacer}[sys.argv[2]]))
    sys.exit(supervise(sys.argv[1]))
