"""VM.wait_for's watch on the console: a guest whose kernel panicked (qemu.GuestPanicked)
and a guest's reset made a cold start (VM.restart_at_reset). A mock of QEMU: a console
file written by the test and a process that stands in for QEMU (a `sleep`, or a `true`
for a QEMU that exited), since what is tested is the watch, not a boot (the image suite's
test_a_reboot_keeps_the_state boots and resets a real one)."""

import subprocess

import pytest

from tests.image import qemu


class Booting(qemu.VM):
    """A VM whose start() writes `consoles` in turn, one per start, and runs `sleep`, or
    `true` (QEMU exits) for the starts numbered in `exits`; qmp() records its commands."""

    def __init__(self, tmp_path, consoles, exits=()):
        super().__init__("root.qcow2", tmp_path, overlay=False, name="booting")
        self.consoles, self.exits, self.starts, self.qmp_sent = list(consoles), exits, 0, []

    def start(self):
        with open(self.serial_log, "w") as f:
            f.write(self.consoles[self.starts])
        command = ["true"] if self.starts in self.exits else ["sleep", "60"]
        self.starts += 1
        self.proc = subprocess.Popen(command, start_new_session=True)
        if command == ["true"]:
            self.proc.wait()
        self.started_at = 0
        return self

    def qmp(self, command, **arguments):
        self.qmp_sent.append((command, arguments))


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


RESET = "[  980.24] reboot: Restarting system\n"
POWERED_OFF = "[  980.24] reboot: Power down\n"
BANNER = "booting\nTLS certificate:  SHA256:AB\n"


def test_a_reset_after_restart_at_reset_is_a_cold_start_and_its_console_watched(tmp_path):
    vm = Booting(tmp_path, ["login: ", BANNER]).start()
    try:
        vm.restart_at_reset()
        assert vm.qmp_sent == [("set-action", {"reboot": "shutdown"})]
        mark = vm.mark()
        vm.kill()                                        # QEMU exits at the guest's reset
        with open(vm.serial_log, "a") as f:
            f.write(RESET)
        vm.wait_for("TLS certificate:", timeout=30, since=mark)
        assert vm.starts == 2 and vm.running() and not vm.cold_reset
    finally:
        vm.kill()


def test_only_one_reset_is_made_a_cold_start(tmp_path):
    vm = Booting(tmp_path, ["login: ", RESET], exits={1}).start()
    try:
        vm.restart_at_reset()
        vm.kill()
        with open(vm.serial_log, "a") as f:
            f.write(RESET)
        with pytest.raises(RuntimeError, match="QEMU exited before"):
            vm.wait_for("TLS certificate:", timeout=30)
        assert vm.starts == 2
    finally:
        vm.kill()


@pytest.mark.parametrize("armed", [False, True])
def test_an_exit_at_a_power_off_or_an_unasked_reset_is_not_restarted(tmp_path, armed):
    vm = Booting(tmp_path, [POWERED_OFF if armed else RESET], exits={0}).start()
    if armed:
        vm.restart_at_reset()
    with pytest.raises(RuntimeError, match="QEMU exited before"):
        vm.wait_for("TLS certificate:", timeout=30)
    assert vm.starts == 1


def test_gone_is_none_while_the_guest_runs_and_says_why_when_it_is_not(tmp_path):
    """What the image suite's shared_boot_alive fixture asks before each test on the
    shared boot: a panic between two tests, or a QEMU that exited, ends the run's waiting."""
    running = Booting(tmp_path / "a", ["login: "]).start()
    panicked = Booting(tmp_path / "b", ["login: \n" + PANICKED]).start()
    exited = Booting(tmp_path / "c", ["login: "], exits={0}).start()
    try:
        assert running.gone() is None
        assert panicked.gone().startswith("the guest's kernel panicked")
        assert "Fatal exception in interrupt" in panicked.gone()
        assert exited.gone().startswith("QEMU exited")
    finally:
        for vm in (running, panicked, exited):
            vm.kill()
