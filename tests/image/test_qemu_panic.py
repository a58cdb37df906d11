"""VM.wait_for and a guest whose kernel panicked (qemu.GuestPanicked): no QEMU here, a
console file written by the test and a QEMU process that stands in for one (a `sleep`),
since what is tested is the watch on the console, not a boot."""

import subprocess

import pytest

from tests.image import qemu


class Booting(qemu.VM):
    """A VM whose start() runs `sleep` and writes `consoles` in turn, one per start."""

    def __init__(self, tmp_path, consoles):
        super().__init__("root.qcow2", tmp_path, overlay=False, name="panicky")
        self.consoles, self.starts = list(consoles), 0

    def start(self):
        with open(self.serial_log, "w") as f:
            f.write(self.consoles[self.starts])
        self.starts += 1
        self.proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.started_at = 0
        return self


PANICKED = ("[    2.78] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n"
            "[    2.78] Kernel panic - not syncing: Fatal exception in interrupt\n")


def test_a_panic_fails_at_once_not_at_the_timeout(tmp_path):
    vm = Booting(tmp_path, [PANICKED]).start()
    try:
        with pytest.raises(qemu.GuestPanicked, match="panicked before 'TLS certificate:'"):
            vm.wait_for("TLS certificate:", timeout=600)
    finally:
        vm.kill()


def test_a_panicked_guest_is_started_again_and_its_new_console_watched(tmp_path):
    vm = Booting(tmp_path, [PANICKED, "booting\nTLS certificate:  SHA256:AB\n"]).start()
    try:
        vm.wait_for("TLS certificate:", timeout=30, since=0, restarts_after_panic=1)
        assert vm.starts == 2 and vm.running()
    finally:
        vm.kill()


def test_a_second_panic_after_the_restarts_allowed_fails(tmp_path):
    vm = Booting(tmp_path, [PANICKED, PANICKED]).start()
    try:
        with pytest.raises(qemu.GuestPanicked):
            vm.wait_for("TLS certificate:", timeout=30, restarts_after_panic=1)
        assert vm.starts == 2
    finally:
        vm.kill()
