"""The appliance image booted under TCG: boot to a healthy HTTPS API, idle memory.

    python -m tests.bench boot
    BENCH_BOOT_RUNS=3 BENCH_BOOT_IDLE=60 python -m tests.bench boot

Each run is a first boot, as a user's, by UEFI and by BIOS in turn (BENCH_BOOT_FIRMWARE,
"uefi,bios" by default: the same disk, docs/image.md "Disk layout"): a fresh overlay over
the built image (cached build: instant when nothing changed), a blank second disk for the state, the admin password and
root's SSH key in fw_cfg. Timed from QEMU's start to the first 200 of `/v1/health` over
HTTPS on the forwarded 443 (the API answers it only once its store is open), with QEMU's
own CPU seconds until then (less sensitive to the machine's load). Then, inside
the guest, `systemd-analyze` and, after BENCH_BOOT_IDLE seconds, the RSS and PSS of every
process of the appliance's units (the daemons started on first use are not running yet:
docs/on-demand-daemons.md). Last, what first use costs: a secret's POST to ACTIVE while the
delivery daemon is not running (its path unit starts it), then a second one's. The load average is printed beside: on this shared
2-core machine it moves the figures more than any change. Needs root (the build).
Goals (issue 12): boot to a healthy API < 30 s, idle memory < 150 MB RSS in total.

After use (issue 32): then one use of every capability, the very list bench_memory makes
(`bench_memory.uses`: secrets, a domain and record, a certificate, a repository, a config
on the appliance's own node, a project), BENCH_BOOT_AFTER_USE_IDLE seconds idle (600 by
default, the issue's 10 minutes; 0 skips this part), and the RSS and PSS of the appliance's
processes per unit and in total, with which on-demand daemons still run and why (their
journal's "idle, kept running: ..." line, daemons/base.py), and when a sleeping one's timer
wakes it (its "its timer wakes it at ..." line; the waker, appliance-wake, is counted
when it runs: docs/on-demand-daemons.md). Goal: <= 150 MB RSS in total.
"""

import contextlib
import http.client
import os
import ssl
import subprocess
import time

from . import bench_memory, cpu_seconds, note, remove, table, temp_dir, title
from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import TOKEN_PATH, Client
from tests.image import qemu
from tests.image.guest import GuestShell

RUNS = int(os.environ.get("BENCH_BOOT_RUNS", "2"))
FIRMWARES = os.environ.get("BENCH_BOOT_FIRMWARE", "uefi,bios").split(",")
IDLE_SECONDS = float(os.environ.get("BENCH_BOOT_IDLE", "60"))
AFTER_USE_IDLE_SECONDS = float(os.environ.get("BENCH_BOOT_AFTER_USE_IDLE", "600"))
HEALTHY_TIMEOUT = 900
UNITS = qemu.APPLIANCE_UNITS
GOAL_BOOT_SECONDS, GOAL_RSS_MB = 30, 150
PASSWORD = "bench-boot-password"
SSH_CONNECT_ATTEMPTS = 12


def healthy_after(vm):
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + HEALTHY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", vm.port(443), context=ctx,
                                               timeout=5)
            conn.request("GET", "/v1/health")
            if conn.getresponse().status == 200:
                return time.monotonic() - vm.started_at
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no healthy API after {HEALTHY_TIMEOUT} s:\n{vm.tail()}")


def boot_counted(image, work, key, n, firmware):
    """boot_once, and once more (a new first boot) if the guest's kernel panicked: under
    TCG on this host's QEMU 7.2 that is the emulator's (qemu.GuestPanicked), and the run
    says so rather than dying or counting it."""
    try:
        return boot_once(image, work, key, n, firmware)
    except qemu.GuestPanicked:
        note(f"run {n + 1} ({firmware}): the guest's kernel panicked under TCG "
             f"(qemu.GuestPanicked); booted again, from a fresh disk")
    return boot_once(image, work, key, f"{n}again", firmware)


@contextlib.contextmanager
def panic_named(vm):
    """A failure while `vm` runs (an SSH that never connects, a request that times out)
    is raised as qemu.GuestPanicked when the guest's console shows a kernel panic."""
    try:
        yield
    except Exception as exc:
        panicked = vm.panicked()
        if panicked:
            raise qemu.GuestPanicked(panicked) from exc
        raise


def boot_once(image, work, key, n, firmware):
    with open(key + ".pub") as f:
        public = f.read().strip()
    state = qemu.blank_disk(os.path.join(work, f"state{n}.qcow2"))
    vm = qemu.VM(image.raw, work, tcp=[443, 22], extra_disks=[state], name=f"boot{n}",
                 firmware=firmware, fw_cfg={"opt/appliance/admin-password": PASSWORD,
                         "opt/appliance/ssh-key": public})
    with vm, panic_named(vm):
        load_start = os.getloadavg()[0]
        healthy = healthy_after(vm)
        # QEMU's own CPU time up to then: what the boot costs whatever else runs beside it
        # (TCG runs one host thread per vCPU: on 2 free cores it takes at least half this)
        cpu = cpu_seconds(vm.proc.pid)
        # the API can answer before sshd accepts (both wait only for first boot): about a
        # minute of refused connections is tried again
        shell = GuestShell(vm.port(22), key, os.path.join(work, f"known_hosts{n}"), work,
                           attempts=SSH_CONNECT_ATTEMPTS)

        def run(command):
            return shell.run(command).stdout
        # the API serves before the boot is done (libvirt's daemons start after it:
        # docs/boot.md), and systemd-analyze reads nothing until it is
        run("systemctl is-system-running --wait || true")
        analyze = run("systemd-analyze").splitlines()[0].replace("Startup finished in ", "")
        chain = run("systemd-analyze critical-chain appliance-api.service")
        time.sleep(IDLE_SECONDS)
        # the agent's unit runs only on an enrolled node: what does not run has no memory
        running = [u for u in UNITS
                   if run(f"systemctl is-active {u} || true").strip() == "active"]
        memory = qemu.unit_memory(run, running)
        first_use = secrets_to_active(vm)
        after_use = used_then_idle(vm, run) if AFTER_USE_IDLE_SECONDS > 0 else None
        shell.close()
        vm.shutdown(120)
    return {"firmware": firmware, "healthy": healthy, "cpu": cpu, "analyze": analyze,
            "memory": memory, "after_use": after_use,
            "chain": chain, "idle": sorted(set(UNITS) - set(running)),
            "first_use": first_use, "load": (load_start, os.getloadavg()[0])}


def used_then_idle(vm, run):
    """One use of every capability (bench_memory's), AFTER_USE_IDLE_SECONDS idle, then the
    memory of the running units, and each on-demand daemon's state and why it runs."""
    from daemons import ON_DEMAND  # noqa: PLC0415
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    outcome = bench_memory.use_every_capability(
        None, connect=lambda: http.client.HTTPSConnection("127.0.0.1", vm.port(443),
                                                          context=ctx, timeout=60),
        password=PASSWORD, node_name=None)
    load_start = os.getloadavg()[0]
    time.sleep(AFTER_USE_IDLE_SECONDS)
    # the timed sleepers' waker too (a shell loop, while a daemon sleeps with a timer)
    running = [u for u in UNITS + ["appliance-wake"]
               if run(f"systemctl is-active {u} || true").strip() == "active"]
    memory = qemu.unit_memory(run, running)
    daemons = {}
    for name in ON_DEMAND:
        unit = f"appliance-{name}"
        kept = run(f"journalctl -b -o cat -u {unit} | grep 'idle, kept running' | tail -n 1 "
                   "|| true").strip()
        starts = run(f"journalctl -b -o cat -u {unit} | grep -c 'started; watching' "
                     "|| true").strip()
        timed = run(f"journalctl -b -o cat -u {unit} | grep 'its timer wakes it at' "
                    "| tail -n 1 || true").strip()
        daemons[name] = {"active": unit in running, "starts": starts,
                         "why": kept.split("idle, kept running: ", 1)[-1] if kept else "",
                         "timer": timed.split("its timer wakes it ", 1)[-1] if timed else ""}
    return {"uses": outcome, "memory": memory, "daemons": daemons,
            "load": (load_start, os.getloadavg()[0])}


def secrets_to_active(vm, count=2, timeout=300):
    """Seconds from each secret's POST to ACTIVE, one after the other: the first starts
    the delivery daemon through its path unit, the next finds it running."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    client = Client("127.0.0.1", vm.port(443), ssl_context=ctx)
    token = client.post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                     "password": PASSWORD, "scope": ""}).json["access_token"]
    admin = client.with_token(token)
    seconds = []
    for n in range(count):
        started = time.monotonic()
        made = admin.post("/v1/secret/secrets", {
            "name": f"bench-{n}", "project_id": ADMIN_PROJECT,
            "constructor": {"kind": "plain"}, "value": "v"})
        assert made.status == 201, made
        while admin.get(f"/v1/secret/secrets/{made.json['uuid']}").json["status"] != "ACTIVE":
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"secret {n} not ACTIVE after {timeout} s")
            time.sleep(0.1)
        seconds.append(time.monotonic() - started)
    return seconds


def main():
    title("boot: the appliance image under TCG, boot to a healthy HTTPS API, idle memory")
    if os.geteuid() != 0:
        note("skipped: the image build needs root")
        return
    image = qemu.build_image("appliance", log=open(os.devnull, "w"))
    work = temp_dir("boot")
    try:
        key = os.path.join(work, "key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        runs = [boot_counted(image, work, key, n, FIRMWARES[n % len(FIRMWARES)])
                for n in range(RUNS)]
    finally:
        remove(work)
    table(["run", "firmware", "healthy HTTPS s", "QEMU CPU s", "systemd-analyze", "RSS MB",
           "PSS MB", "load 1-min"],
          [[n + 1, r["firmware"], f"{r['healthy']:.1f}", f"{r['cpu']:.1f}", r["analyze"],
            f"{sum(v[0] for v in r['memory'].values()) / 1024:.1f}",
            f"{sum(v[1] for v in r['memory'].values()) / 1024:.1f}",
            f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}"] for n, r in enumerate(runs)])
    note("not running when idle (started on first use): " + ", ".join(runs[-1]["idle"]))
    table(["run", "1st secret to ACTIVE s (delivery started)", "2nd secret s"],
          [[n + 1, f"{r['first_use'][0]:.1f}", f"{r['first_use'][1]:.2f}"]
           for n, r in enumerate(runs)])
    note("critical chain of the last run:\n" + runs[-1]["chain"])
    last = runs[-1]["memory"]
    table(["unit (last run)", "RSS MB", "PSS MB"],
          [[unit, f"{rss / 1024:.1f}", f"{pss / 1024:.1f}"] for unit, (rss, pss) in last.items()])
    after = [r["after_use"] for r in runs if r["after_use"]]
    if after:
        note(f"\nafter one use of every capability and {AFTER_USE_IDLE_SECONDS:.0f} s idle "
             f"(uses: " + ", ".join(f"{k} {v}" for k, v in after[-1]["uses"].items()) + ")")
        table(["run", "RSS MB", "PSS MB", "units running", "load 1-min"],
              [[n + 1, f"{sum(v[0] for v in a['memory'].values()) / 1024:.1f}",
                f"{sum(v[1] for v in a['memory'].values()) / 1024:.1f}", len(a["memory"]),
                f"{a['load'][0]:.1f} -> {a['load'][1]:.1f}"] for n, a in enumerate(after)])
        table(["unit (last run, after use)", "RSS MB", "PSS MB"],
              [[unit, f"{rss / 1024:.1f}", f"{pss / 1024:.1f}"]
               for unit, (rss, pss) in after[-1]["memory"].items()])
        table(["on-demand daemon", "now", "starts this boot", "why it still runs",
               "its last timed sleep"],
              [[name, "running" if d["active"] else "asleep", d["starts"],
                d["why"] if d["active"] else "", d["timer"]]
               for name, d in after[-1]["daemons"].items()])
        rss_after = min(sum(v[0] for v in a["memory"].values()) for a in after) / 1024
        note(f"goal after use: <= {GOAL_RSS_MB} MB RSS: best {rss_after:.1f} MB")
    best = min(r["healthy"] for r in runs)
    rss = min(sum(v[0] for v in r["memory"].values()) for r in runs) / 1024
    note(f"goals: boot to healthy < {GOAL_BOOT_SECONDS} s: best {best:.1f} s; "
         f"idle < {GOAL_RSS_MB} MB RSS: best {rss:.1f} MB (idle {IDLE_SECONDS:.0f} s)")


if __name__ == "__main__":
    main()
