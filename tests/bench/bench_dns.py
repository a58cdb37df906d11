"""DNS: the real DNS daemon (`python -m daemons.dns`) against NSD, both measured with
dnsperf in the same run, on the same zone and the same query file; then the latency from
a store write to the first answer carrying the new record.

Both servers run on free loopback ports. NSD (Debian package) gets one server process
(its default, `server-count: 1`), rate limiting off (`rrl-ratelimit: 0`) and
`minimal-responses: yes` (no NS RRset in the authority section of positive answers, as
ours). Load: dnsperf, one client, 100 queries in flight (its defaults), in slices of
SLICE_SECONDS alternating ours / NSD, ROUNDS times, so that bursts of other load on the
machine hit both alike. Server CPU time is read from /proc/<pid>/stat (utime + stime of
every process of the server, all threads) before and after each slice. Ours is the DNS
process as the supervisor and its unit start it (`python -P -m daemons.dns`, the shipped
settings and logging). Printed: min / median / max over the slices, and of the ratio
ours / NSD per pair of side-by-side slices.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

from state import Store
from tests import processes
from tests.apiserver import free_port

from . import Service, median, note, remove, settings_for, spread, table, temp_dir, title

ZONE = "bench.test"
PROJECT = "00000000-0000-0000-0000-000000000000"
HOSTS = 1000                # A records host0 .. host999
TXTS = 100                  # TXT records txt0 .. txt99
QUERY_LINES = 10000
ROUNDS = int(os.environ.get("BENCH_DNS_ROUNDS", "6"))
SLICE_SECONDS = 3
LATENCY_SAMPLES = 20
SOA = {"primary_dns": f"ns1.{ZONE}", "serial": 2024010101, "refresh": 7200, "retry": 900,
       "expire": 1209600, "ttl": 300}


# ---- tools ---------------------------------------------------------------------------

def ensure_tools():
    """{tool: path or None}; installs the Debian packages when missing and root."""
    wanted = {"nsd": "nsd", "dnsperf": "dnsperf"}
    missing = [pkg for tool, pkg in wanted.items() if not _which(tool)]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        note(f"missing: {', '.join(missing)}; apt-get install -y {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
        if subprocess.call(cmd, **quiet) != 0:
            subprocess.call(["apt-get", "update", "-qq"], **quiet)
            subprocess.call(cmd, **quiet)
    return {tool: _which(tool) for tool in wanted}


def _which(tool):
    return shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/usr/bin/{tool}") if os.access(p, os.X_OK)), None)


def cpu_seconds(pid):
    """utime + stime of pid and every descendant (NSD forks its server processes)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in [pid] + _descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total / tick


def _descendants(pid):
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]),
                                       []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


# ---- the zone, the same for both servers ----------------------------------------------

def zone_records():
    """(name, type, ttl, data) of the bench zone; names relative, as the API stores them."""
    rows = [("@", "SOA", 3600, SOA),
            ("@", "NS", 3600, {"content": f"ns1.{ZONE}"}),
            ("@", "NS", 3600, {"content": f"ns2.{ZONE}"}),
            ("ns1", "A", 3600, {"address": "10.53.0.1"}),
            ("ns2", "A", 3600, {"address": "10.53.0.2"}),
            ("*.wild", "A", 300, {"address": "10.99.0.1"})]
    rows += [(f"host{i}", "A", 300, {"address": f"10.{i // 250}.{i % 250}.{1 + i % 7}"})
             for i in range(HOSTS)]
    rows += [(f"txt{i}", "TXT", 300, {"content": f"v=bench{i} " + "x" * (i % 40)})
             for i in range(TXTS)]
    return rows


def fill_store(store, rows):
    domain = store.collection("dns_domains").insert({
        "name": ZONE, "project_id": PROJECT, "description": "bench", "tags": [],
        "sync_to_ecosystem": False})
    store.collection("dns_records").insert_many([{
        "domain": domain["uuid"], "project_id": PROJECT, "type": rtype, "ttl": ttl,
        "prio": None, "disabled": False, "tags": [],
        "record": {"kind": rtype, "name": name, **data}} for name, rtype, ttl, data in rows])
    return domain


def zone_file(rows):
    lines = [f"$ORIGIN {ZONE}.", "$TTL 300"]
    for name, rtype, ttl, data in rows:
        if rtype == "SOA":
            rdata = (f"{data['primary_dns']}. hostmaster.{ZONE}. {data['serial']} "
                     f"{data['refresh']} {data['retry']} {data['expire']} {data['ttl']}")
        elif rtype == "NS":
            rdata = data["content"] + "."
        elif rtype == "A":
            rdata = data["address"]
        else:
            raw = data["content"].replace("\\", "\\\\").replace('"', '\\"')
            rdata = " ".join(f'"{raw[i:i + 255]}"' for i in range(0, len(raw), 255))
        lines.append(f"{name} {ttl} IN {rtype} {rdata}")
    return "\n".join(lines) + "\n"


def query_file(path):
    """QUERY_LINES queries: 70% A of existing hosts, 10% TXT, 8% wildcard names,
    5% NXDOMAIN, 4% NODATA (AAAA of a host), 3% the same A queries in mixed case."""
    lines = []
    for i in range(QUERY_LINES):
        k = i % 100
        if k < 70:
            lines.append(f"host{(i * 7) % HOSTS}.{ZONE} A")
        elif k < 80:
            lines.append(f"txt{i % TXTS}.{ZONE} TXT")
        elif k < 88:
            lines.append(f"w{i}.wild.{ZONE} A")
        elif k < 93:
            lines.append(f"missing{i}.{ZONE} A")
        elif k < 97:
            lines.append(f"host{i % HOSTS}.{ZONE} AAAA")
        else:
            lines.append(f"HoSt{i % HOSTS}.BeNcH.TeSt A")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return lines


# ---- the servers ---------------------------------------------------------------------

class Ours:
    label = "appliance dns daemon"

    def __init__(self, state_dir):
        settings = settings_for(state_dir)
        self.port = settings["dns_port"]
        self.service = Service("dns", settings, lambda service: answers(self.port))
        self.proc = self.service.proc

    def stop(self):
        self.service.stop()
        self.service.remove_log()


class NSD:
    label = "NSD"

    def __init__(self, nsd, workdir, port, rows):
        self.port = port
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, f"{ZONE}.zone"), "w") as f:
            f.write(zone_file(rows))
        conf = os.path.join(workdir, "nsd.conf")
        with open(conf, "w") as f:
            f.write(f"""server:
  ip-address: 127.0.0.1
  port: {port}
  do-ip6: no
  server-count: 1
  zonesdir: "{workdir}"
  pidfile: "{workdir}/nsd.pid"
  username: ""
  chroot: ""
  database: ""
  zonelistfile: "{workdir}/zone.list"
  xfrdfile: "{workdir}/xfrd.state"
  xfrdir: "{workdir}"
  logfile: "{workdir}/nsd.log"
  verbosity: 1
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
  minimal-responses: yes
remote-control:
  control-enable: no
zone:
  name: {ZONE}
  zonefile: {ZONE}.zone
""")
        self.workdir = workdir
        self.proc = subprocess.Popen([nsd, "-d", "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)

    def log_text(self):
        try:
            with open(os.path.join(self.workdir, "nsd.log"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        workers = _descendants(self.proc.pid)
        if processes.stop(self.proc) == -signal.SIGKILL:
            for pid in workers:       # it forks its servers; killed, it cannot stop them
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def ask(port, name, rtype="A", timeout=0.3, tcp=False):
    import dns.message
    import dns.query
    q = dns.message.make_query(name, rtype)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=port, timeout=timeout)
    return dns.query.udp(q, "127.0.0.1", port=port, timeout=timeout)


def answers(port):
    """The server on `port` answers for the bench zone."""
    try:
        return bool(ask(port, ZONE, "SOA").answer)
    except Exception:
        return False


def wait_ready(server, timeout=15):
    deadline = time.monotonic() + timeout
    while not answers(server.port):
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.label} exited with {server.proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.label} did not answer in {timeout} s")
        time.sleep(0.05)


def same_answers(a, b, lines):
    """Compare both servers on a sample of the query file: rcode, flags AA/TC, and the
    answer and authority sections (as sets of RRs; the additional section differs by
    design: NSD adds the A records of the NS names to an NS answer, we do not).
    Returns (compared, different)."""
    sample = lines[::max(1, len(lines) // 200)] + [f"{ZONE} NS", f"{ZONE} SOA",
                                                    f"www.nope.{ZONE} MX"]
    different = []
    for line in sample:
        name, rtype = line.split()
        ra, rb = ask(a, name, rtype, 2), ask(b, name, rtype, 2)

        def shape(r):
            import dns.flags
            def rrs(section):       # single RRs: the order inside an RRset is free
                return sorted(line.lower() for x in section for line in str(x).splitlines())
            return (r.rcode(), bool(r.flags & dns.flags.AA), bool(r.flags & dns.flags.TC),
                    rrs(r.answer), rrs(r.authority))
        if shape(ra) != shape(rb):
            different.append(line)
    return len(sample), different


# ---- dnsperf -------------------------------------------------------------------------

def dnsperf(tool, port, queries, seconds):
    out = subprocess.run([tool, "-s", "127.0.0.1", "-p", str(port), "-d", queries,
                          "-l", str(seconds), "-c", "1", "-q", "100", "-t", "2"],
                         capture_output=True, text=True).stdout

    def number(label):
        m = re.search(rf"{label}:\s+([0-9.]+)", out)
        if m is None:
            raise RuntimeError(f"dnsperf output without {label!r}:\n{out[-2000:]}")
        return float(m.group(1))
    return {"sent": int(number("Queries sent")), "completed": int(number("Queries completed")),
            "lost": int(number("Queries lost")), "qps": number("Queries per second"),
            "latency_ms": number(r"Average Latency \(s\)") * 1000,
            "seconds": number(r"Run time \(s\)")}


def measure(tool, servers, queries):
    results = {s.label: [] for s in servers}
    for s in servers:                           # warm-up: caches, code paths, CPU clocks
        dnsperf(tool, s.port, queries, 1)
    for _ in range(ROUNDS):
        for s in servers:
            cpu0 = cpu_seconds(s.proc.pid)
            r = dnsperf(tool, s.port, queries, SLICE_SECONDS)
            r["cpu_us"] = (cpu_seconds(s.proc.pid) - cpu0) / max(1, r["completed"]) * 1e6
            results[s.label].append(r)
    return results


def summary(runs):
    completed = sum(r["completed"] for r in runs)
    return {"qps": [r["qps"] for r in runs], "latency_ms": [r["latency_ms"] for r in runs],
            "cpu_us": [r["cpu_us"] for r in runs],
            "lost": sum(r["lost"] for r in runs), "sent": sum(r["sent"] for r in runs),
            "cpu_us_all": sum(r["cpu_us"] * r["completed"] for r in runs) / max(1, completed)}


# ---- write -> answer latency ---------------------------------------------------------

def write_latency(store, domain, port):
    """Seconds from the start of a store insert (and from its return) to the first UDP
    answer that carries the new record; queries back to back."""
    import dns.message
    import dns.query
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(0.05)
    from_start, from_return = [], []
    try:
        for i in range(LATENCY_SAMPLES):
            name = f"late{i}.{ZONE}"
            wire = dns.message.make_query(name, "A").to_wire()
            sock.send(wire)
            assert dns.message.from_wire(sock.recv(4096)).rcode() == 3   # NXDOMAIN before
            t0 = time.perf_counter()
            store.collection("dns_records").insert({
                "domain": domain["uuid"], "project_id": PROJECT, "type": "A", "ttl": 60,
                "prio": None, "disabled": False, "tags": [],
                "record": {"kind": "A", "name": f"late{i}", "address": "10.77.0.1"}})
            t1 = time.perf_counter()
            while True:
                sock.send(wire)
                try:
                    reply = sock.recv(4096)
                except socket.timeout:
                    reply = None
                if reply is not None and dns.message.from_wire(reply).answer:
                    t2 = time.perf_counter()
                    break
                if time.perf_counter() - t0 > 10:
                    raise RuntimeError(f"{name} not answered 10 s after the write")
            from_start.append(t2 - t0)
            from_return.append(t2 - t1)
            time.sleep(0.05)
    finally:
        sock.close()
    return from_start, from_return


# ---- main ----------------------------------------------------------------------------

def main():
    title(f"bench_dns: the DNS daemon vs NSD under dnsperf ({HOSTS + TXTS + 6} records, "
          f"{QUERY_LINES} queries in the file, {ROUNDS} x {SLICE_SECONDS} s slices each)")
    tools = ensure_tools()
    if not tools["dnsperf"]:
        note("!! dnsperf is NOT available and could not be installed (Debian package "
             "`dnsperf`): no throughput figures; only the write -> answer latency follows.")
    if not tools["nsd"]:
        note("!! NSD is NOT available and could not be installed (Debian package `nsd`): "
             "no comparison with NSD; our own figures only.")
    work = temp_dir("dns")
    store = Store(os.path.join(work, "state"))
    rows = zone_records()
    domain = fill_store(store, rows)
    queries = os.path.join(work, "queries.txt")
    lines = query_file(queries)
    ours = nsd = None
    try:
        ours = Ours(store.directory)
        servers = [ours]
        if tools["nsd"]:
            nsd = NSD(tools["nsd"], os.path.join(work, "nsd"), free_port(), rows)
            try:
                wait_ready(nsd)
                servers.append(nsd)
            except RuntimeError as e:
                note(f"!! NSD did not start ({e}); its log:\n{nsd.log_text()}")
        if len(servers) == 2:
            compared, different = same_answers(ours.port, nsd.port, lines)
            verdict = ("all the same" if not different else
                       f"{len(different)} differ, e.g. {', '.join(different[:5])}")
            note(f"answers compared on {compared} queries of the file: {verdict}")
        if tools["dnsperf"]:
            results = measure(tools["dnsperf"], servers, queries)
            sums = {label: summary(runs) for label, runs in results.items()}
            table(["server", "queries/s min / median / max", "avg latency ms min / median / max",
                   "server CPU us/query min / median / max", "lost"],
                  [[s.label, spread(sums[s.label]["qps"], "{:,.0f}"),
                    spread(sums[s.label]["latency_ms"], "{:.3f}"),
                    spread(sums[s.label]["cpu_us"]),
                    f"{sums[s.label]['lost']:,} of {sums[s.label]['sent']:,}"]
                   for s in servers])
            if len(servers) == 2:
                a, b = results[ours.label], results[nsd.label]
                qps = [x["qps"] / y["qps"] for x, y in zip(a, b)]
                cpu = [x["cpu_us"] / y["cpu_us"] for x, y in zip(a, b)]
                note(f"ours / NSD per pair of slices, queries/s: {spread(qps)} "
                     f"(goal >= 0.80, no loss); server CPU per query: {spread(cpu)} "
                     f"(goal <= 1.50)")
                met = (median(qps) >= 0.8 and sums[ours.label]["lost"] == 0
                       and median(cpu) <= 1.5)
                note(f"goal {'met' if met else 'NOT met'} by the medians in this run "
                     f"(load average now {os.getloadavg()[0]:.2f})")
        from_start, from_return = write_latency(store, domain, ours.port)
        table(["store write -> first answer with the new record", "ms min / median / max"],
              [["from the start of the insert", spread([x * 1000 for x in from_start], "{:.1f}")],
               ["from the return of the insert",
                spread([x * 1000 for x in from_return], "{:.1f}")]])
        note(f"({LATENCY_SAMPLES} samples; the daemon rebuilds the index of "
             f"{HOSTS + TXTS + 6}+ records on every write)")
    finally:
        for server in (nsd, ours):
            if server is not None:
                server.stop()
        remove(work)


if __name__ == "__main__":
    main()
