"""docs/boot.md's QEMU line is the command the boot test runs (tests/image/guest.py's
appliance_vm), with the doc's fixed ports, paths and shell variables: a user who copies it
boots the appliance as the tests do. Needs neither root nor a built image: the line is
expanded by bash (printf prints the arguments it would pass) and compared with
VM.command()."""

import os
import re
import subprocess

from tests.image.guest import FW_PASSWORD, FW_SSH_KEY, FORWARDED_TCP, appliance_vm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "boot.md")
DOC_PORTS = {443: 28443, 53: 28053, 22: 28022, 5432: 28432}


def doc_blocks():
    with open(DOC) as f:
        return re.findall(r"```\n(.*?)```", f.read(), re.S)


def qemu_block():
    return next(block for block in doc_blocks() if "qemu-system-x86_64" in block)


def shown_command(block, tmp_path, password, key):
    """The arguments bash passes to qemu-system-x86_64 in the doc's block."""
    script = block.replace("qemu-system-x86_64", "printf '%s\\0' qemu-system-x86_64")
    # the doc's own assignments of PASSWORD and KEY are overridden by the test's values
    script = re.sub(r"^(PASSWORD|KEY)=.*$", "", script, flags=re.M)
    return subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                          env={"PASSWORD": password, "KEY": key, "PATH": os.environ["PATH"]},
                          cwd=tmp_path).stdout.decode().split("\0")[:-1]


def doc_vm(password, key, **options):
    return appliance_vm("root.qcow2", ".", "state.qcow2", {FW_PASSWORD: password, FW_SSH_KEY: key},
                        name="appliance", overlay=False,
                        host_ports={("tcp", guest): host for guest, host in DOC_PORTS.items()},
                        **options)


def test_the_qemu_line_of_the_doc_is_what_the_boot_test_runs(tmp_path):
    password, key = "pw with spaces", "ssh-ed25519 AAAAC3Nza test@host"
    shown = shown_command(qemu_block(), tmp_path, password, key)
    # the boot test's firmware: UEFI through OVMF, with the variables file of step 1
    assert shown == doc_vm(password, key).command()
    assert "if=pflash,format=raw,unit=1,file=./appliance-efivars.fd" in shown
    assert sorted(DOC_PORTS) == sorted(FORWARDED_TCP)
    assert "cp /usr/share/OVMF/OVMF_VARS_4M.fd appliance-efivars.fd" in "\n".join(doc_blocks())


def test_the_doc_line_without_its_pflash_lines_is_the_bios_boot(tmp_path):
    """The doc says: for BIOS, leave out the two `-drive if=pflash` lines."""
    password, key = "pw", "ssh-ed25519 AAAAC3Nza test@host"
    block = "\n".join(ln for ln in qemu_block().splitlines() if "if=pflash" not in ln)
    shown = shown_command(block, tmp_path, password, key)
    assert shown == doc_vm(password, key, firmware="bios").command()
    assert not any("pflash" in arg for arg in shown)


def test_the_doc_logs_in_with_the_banners_fingerprint_on_the_forwarded_port():
    text = "\n".join(doc_blocks())
    assert ("appliance login --endpoint https://127.0.0.1:28443 --fingerprint \"$FINGERPRINT\""
            in text)
    assert "dig +tcp -p 28053 @127.0.0.1" in text and "ssh -p 28022 root@127.0.0.1" in text
    assert "psql -h 127.0.0.1 -p 28432 " in text            # the forwarded sqldb_port
