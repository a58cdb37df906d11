"""Zones of the built-in DNS server: an in-memory index built from the `dns_domains` and
`dns_records` kinds, and the DNS wire format in and out.

Pure: no sockets, no store, no threads, no clock. The server (appliance/dns/server.py)
parses a query with `parse_query()`, answers it with `ZoneIndex.answer()` and caches the
bytes; the daemon (daemons/dns.py) builds a new index with `ZoneIndex.build()` whenever
either kind changes. An index is never modified once built, so a server thread may use
one while another thread builds the next.

Names are kept as lower-case wire format (`b"\\x03www\\x07example\\x04test\\x00"`):
that is unambiguous (a label may hold any byte, even a dot), its parent is a slice
(`name[name[0] + 1:]`) and a query name needs only `bytes.lower()` (DNS compares names
ASCII-case-insensitively, RFC 4343).

What is answered, and how, is described in docs/dns-server.md.
"""

import socket
import struct

from .records import SOA_DEFAULTS

# record types and classes
A, NS, SOA, HINFO, TXT, OPT, DS = 1, 2, 6, 13, 16, 41, 43
IXFR, AXFR, MAILB, MAILA, ANY = 251, 252, 253, 254, 255
CLASS_IN, CLASS_ANY = 1, 255
TYPES = {"A": A, "NS": NS, "SOA": SOA, "TXT": TXT}
TYPE_NAMES = {v: k for k, v in TYPES.items()}

# response codes (BADVERS needs the extended RCODE of the OPT record)
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
BADVERS = 16

# header flags
QR, AA, TC, RD, CD = 0x8000, 0x0400, 0x0200, 0x0100, 0x0010
OPCODE_QUERY = 0

UDP_PLAIN_LIMIT = 512           # the UDP answer limit of a query without EDNS (RFC 1035)
MAX_UDP_PAYLOAD = 1232          # the most we send over UDP, and what our OPT advertises
TCP_LIMIT = 65535
# What one TXT answer may hold so that it fits in a TCP message whatever name is asked
# (a wildcard answers names up to 255 octets): the message limit less the header (12),
# the longest question (255 + 4) and our OPT record (11). Each record costs its RDATA
# plus RR_OVERHEAD: its owner as a compression pointer to the question (2) and type,
# class, TTL, RDLENGTH (10).
TXT_ANSWER_LIMIT = TCP_LIMIT - 12 - (255 + 4) - 11
RR_OVERHEAD = 12
# ANY over UDP answers one RRset (RFC 8482), the first of these the name has
ANY_PREFERENCE = (A, SOA, NS, TXT)

_MAX_TTL = 2 ** 31 - 1          # RFC 2181 section 8
_ROOT = b"\x00"
_WILD = b"\x01*"
_OPT_HEADER = b"\x00\x00\x29"   # root owner, type OPT


class DropQuery(Exception):
    """The packet gets no answer at all (too short to answer, or itself a response)."""


class FormatError(Exception):
    """The packet is a query we cannot read: answer FORMERR."""


# ---- names ---------------------------------------------------------------------------

def to_wire(text):
    """'www.Example.test' (or with a trailing dot) -> lower-case wire format.
    Raises ValueError for names that cannot be one (empty label, label > 63 octets,
    name > 255 octets, non-ASCII that IDNA cannot encode)."""
    text = text.strip().lower()
    if text in ("", "."):
        return _ROOT
    if text.endswith("."):
        text = text[:-1]
    out = bytearray()
    for label in text.split("."):
        try:
            raw = label.encode("ascii")
        except UnicodeEncodeError:
            raw = label.encode("idna")
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad label {label!r} in {text!r}")
        out.append(len(raw))
        out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"name too long: {text!r}")
    return bytes(out)


def to_text(wire):
    """Wire format -> 'www.example.test.' (for logs and tests)."""
    labels, i = [], 0
    while wire[i]:
        n = wire[i]
        labels.append(wire[i + 1:i + 1 + n].decode("ascii", "backslashreplace")
                      .replace(".", "\\."))
        i += 1 + n
    return ".".join(labels) + "."


def parent(wire):
    return wire[wire[0] + 1:]


def _is_below(name, origin):
    """True if `name` is `origin` or below it (both wire format)."""
    if not name.endswith(origin):
        return False
    # the suffix must start on a label boundary of name
    cut = len(name) - len(origin)
    i = 0
    while i < cut:
        i += name[i] + 1
    return i == cut


# ---- the index -----------------------------------------------------------------------

class RRset:
    """One RRset: its TTL (the smallest of its records', RFC 2181 5.2) and rdatas.
    An rdata is bytes for A and TXT, a wire name for NS, and for SOA a tuple
    (mname, rname, the 20 bytes of serial/refresh/retry/expire/minimum)."""

    __slots__ = ("rtype", "ttl", "rdatas", "_seen")

    def __init__(self, rtype, ttl):
        self.rtype, self.ttl, self.rdatas = rtype, ttl, []
        self._seen = set()

    def add(self, ttl, rdata):
        self.ttl = min(self.ttl, ttl)
        if rdata not in self._seen:         # an RRset is a set: duplicates collapse
            self._seen.add(rdata)
            self.rdatas.append(rdata)


class Zone:
    __slots__ = ("origin", "name", "domain_uuid", "project_id", "nodes", "exists", "cuts",
                 "soa", "negative_soa")

    def __init__(self, origin, domain_uuid, project_id=None):
        self.origin = origin
        self.name = to_text(origin)
        self.domain_uuid = domain_uuid
        self.project_id = project_id
        self.nodes = {}         # owner -> {rtype: RRset}
        self.exists = set()     # owners and the empty non-terminals between them and apex
        self.cuts = set()       # owners of NS RRsets below the apex (delegations)
        self.soa = None
        self.negative_soa = None    # the SOA of negative answers (TTL per RFC 2308 3)

    def rrset(self, owner, rtype, ttl):
        types = self.nodes.setdefault(owner, {})
        rrset = types.get(rtype)
        if rrset is None:
            rrset = types[rtype] = RRset(rtype, ttl)
        return rrset

    def finish(self):
        self.soa = self.nodes[self.origin][SOA]
        minimum = struct.unpack("!I", self.soa.rdatas[0][2][16:20])[0]
        self.negative_soa = RRset(SOA, min(self.soa.ttl, minimum))
        self.negative_soa.rdatas = self.soa.rdatas[:1]
        for owner, types in self.nodes.items():
            name = owner
            while name not in self.exists:
                self.exists.add(name)
                if name == self.origin:
                    break
                name = parent(name)
            if NS in types and owner != self.origin and not owner.startswith(_WILD):
                self.cuts.add(owner)


class Result:
    """What a lookup found, before encoding."""

    __slots__ = ("rcode", "aa", "answer", "authority", "additional")

    def __init__(self, rcode=NOERROR, aa=True, answer=(), authority=(), additional=()):
        self.rcode, self.aa = rcode, aa
        # lists of (owner wire name, RRset)
        self.answer, self.authority, self.additional = answer, authority, additional


class ZoneIndex:
    """Every served zone, by origin. Build with ZoneIndex.build(domains, records)."""

    def __init__(self, zones=None, problems=(), records=0, memo=None):
        self.zones = zones or {}        # origin (wire) -> Zone
        self.problems = list(problems)  # what was skipped, and why (for the log)
        self.record_count = records
        # (record uuid, revision, zone origin) -> compiled record, or why it was skipped:
        # hand it to the next build() so that only changed records are compiled again
        self.memo = memo or {}

    # -- building -------------------------------------------------------------------

    @classmethod
    def build(cls, domains, records, memo=None):
        """An index of `domains` (dns_domains records) and `records` (dns_records
        records). Anything unusable is skipped and described in `.problems`; building
        never raises on bad data. `memo`: the `.memo` of the previous index (store
        records carry a revision that every write increases, so an entry stays valid
        as long as its key exists)."""
        problems = []
        zones, by_uuid = _zones_of(domains, problems)
        count, new_memo = _add_records(by_uuid, records, memo or {}, problems)
        for origin, zone in list(zones.items()):
            if SOA not in zone.nodes.get(origin, {}):
                problems.append(f"domain {zone.domain_uuid} ({zone.name}): no enabled SOA "
                                "record; the zone is not served")
                del zones[origin]
                continue
            zone.finish()
        problems.extend(_nested_across_owners(zones))
        return cls(zones, problems, count, new_memo)

    # -- lookup ---------------------------------------------------------------------

    def find_zone(self, qname):
        """The most specific zone holding `qname` (wire, lower case), or None."""
        zones = self.zones
        name = qname
        while True:
            zone = zones.get(name)
            if zone is not None:
                return zone
            if name == _ROOT:
                return None
            name = name[name[0] + 1:]

    def lookup(self, qname, qtype, tcp=False):
        """Result for (qname, qtype) of class IN; qname in lower-case wire format."""
        zone = self.find_zone(qname)
        if zone is None:
            return Result(REFUSED, aa=False)
        return _lookup_in(zone, qname, qtype, tcp)

    # -- queries --------------------------------------------------------------------

    def answer(self, query, tcp=False):
        """The complete response (bytes) to a parsed Query."""
        result = _not_looked_up(query) or self.lookup(query.qname, query.qtype, tcp)
        return encode(query, result, _limit(query, tcp))


def _not_looked_up(query):
    """The Result of a query that is answered without a lookup, else None."""
    if query.opcode != OPCODE_QUERY:
        return Result(NOTIMP, aa=False)
    if query.edns_version:
        return Result(BADVERS, aa=False)
    qtype = query.qtype
    if query.qclass not in (CLASS_IN, CLASS_ANY):
        return Result(REFUSED, aa=False)
    if qtype in (AXFR, IXFR):
        return Result(REFUSED, aa=False)         # no zone transfers
    if qtype in (MAILA, MAILB):
        return Result(NOTIMP, aa=False)
    if qtype == OPT:
        return Result(FORMERR, aa=False)         # RFC 6891 6.1.1
    return None


def _zones_of(domains, problems):
    """The zones of the domains that can be served, by origin and by domain uuid."""
    by_uuid = {}
    zones = {}
    for domain in domains:
        try:
            origin = to_wire(str(domain["name"]))
        except (KeyError, TypeError, ValueError, UnicodeError) as e:
            problems.append(f"domain {domain.get('uuid')}: unusable name ({e})")
            continue
        if origin == _ROOT:
            problems.append(f"domain {domain.get('uuid')}: the root zone is not served")
            continue
        if origin in zones:
            problems.append(f"domain {domain.get('uuid')}: {to_text(origin)} is "
                            f"already served from domain {zones[origin].domain_uuid}")
            continue
        zone = Zone(origin, domain.get("uuid"), domain.get("project_id"))
        zones[origin] = zone
        by_uuid[domain.get("uuid")] = zone
    return zones, by_uuid


def _add_records(by_uuid, records, memo, problems):
    """Every enabled record added to its zone, compiled (or taken from `memo`); the
    count of records added and the memo of the new index."""
    new_memo = {}
    count = 0
    for record in records:
        if record.get("disabled"):
            continue
        zone = by_uuid.get(_ref_uuid(record.get("domain")))
        if zone is None:
            continue        # its domain is gone (or not written yet)
        key = (record.get("uuid"), record.get("revision"), zone.origin)
        compiled = memo.get(key)
        if compiled is None:
            try:
                compiled = _compile(zone.origin, record)
            except (KeyError, TypeError, ValueError, UnicodeError, struct.error) as e:
                compiled = f"record {record.get('uuid')} of {zone.name}: skipped ({e})"
        if key[0] is not None and key[1] is not None:
            new_memo[key] = compiled
        if isinstance(compiled, str):
            problems.append(compiled)
            continue
        owner, rtype, ttl, rdata = compiled
        if rtype == SOA and SOA in zone.nodes.get(owner, {}):
            problems.append(f"record {record.get('uuid')} of {zone.name}: skipped "
                            "(the zone already has an SOA record)")
            continue
        zone.rrset(owner, rtype, ttl).add(ttl, rdata)
        count += 1
    return count, new_memo


def _lookup_in(zone, qname, qtype, tcp):
    """Result for (qname, qtype) in the zone that holds qname."""
    nodes = zone.nodes
    if zone.cuts:
        referral = _referral(zone, qname, qtype)
        if referral is not None:
            return referral
    types = nodes.get(qname)
    if types is None:
        if qname in zone.exists:                    # empty non-terminal
            return _nodata(zone)
        # RFC 4592: the closest encloser is the nearest existing ancestor; the
        # wildcard below it, if any, is the source of synthesis
        encloser = qname[qname[0] + 1:]
        while encloser not in zone.exists:
            encloser = encloser[encloser[0] + 1:]
        types = nodes.get(_WILD + encloser)
        if types is None:
            return Result(NXDOMAIN, authority=[(zone.origin, zone.negative_soa)])
    if qtype == ANY:
        if tcp:
            chosen = [types[t] for t in sorted(types)]
        else:
            chosen = [types[t] for t in ANY_PREFERENCE if t in types][:1]
        return Result(answer=[(qname, rrset) for rrset in chosen])
    rrset = types.get(qtype)
    if rrset is None:
        return _nodata(zone)
    return Result(answer=[(qname, rrset)])


def _nested_across_owners(zones):
    """Zones inside a zone of another owner: the API refuses them (appliance/tenancy/
    zones.py), so they are data from before it did. They are still served (dropping one
    could silence a name someone relies on); the log tells an admin which to look at."""
    found = []
    for origin, zone in zones.items():
        above = parent(origin)
        while above != _ROOT:
            outer = zones.get(above)
            if outer is not None and outer.project_id != zone.project_id:
                found.append(f"domain {zone.domain_uuid} ({zone.name}) of project "
                             f"{zone.project_id} is inside {outer.name} of project "
                             f"{outer.project_id}: a name should have one owner "
                             "(docs/security.md); an admin should delete one of them")
                break
            above = parent(above)
    return found


def _ref_uuid(value):
    """A reference is stored as a bare UUID; accept an API path too."""
    if isinstance(value, str) and "/" in value:
        return value.rstrip("/").rsplit("/", 1)[-1]
    return value


def _ttl(value, default=3600):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"bad ttl {value!r}")
    return max(0, min(int(value), _MAX_TTL))


def _owner(origin, name):
    """The owner name of a record `name` relative to the zone at `origin`."""
    name = str(name).strip()
    if name in ("", "@"):
        return origin
    if name.endswith("."):                  # tolerate an absolute name of this zone
        wire = to_wire(name)
        if _is_below(wire, origin):
            return wire
        raise ValueError(f"name {name!r} is outside the zone")
    wire = to_wire(name)[:-1] + origin
    if len(wire) > 255:
        raise ValueError(f"name {name!r} too long in this zone")
    return wire


def _host(value):
    """An absolute host name of NS or SOA rdata (trailing dot optional)."""
    if not isinstance(value, str) or not value.strip(" ."):
        raise ValueError(f"bad host name {value!r}")
    return to_wire(value)


def _mailbox(value, origin):
    """SOA RNAME: 'hostmaster@example.test' or 'hostmaster.example.test' -> wire."""
    if not value:
        return b"\x0ahostmaster" + origin
    value = str(value)
    if "@" in value:
        local, _, domain = value.rpartition("@")
        raw = local.encode("ascii")
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad mailbox {value!r}")
        return bytes([len(raw)]) + raw.lower() + to_wire(domain)
    return to_wire(value)


def txt_rdata_length(octets):
    """RDATA length of TXT content of `octets` UTF-8 bytes: one length octet per
    character-string of at most 255 octets (empty content is one empty string)."""
    return max(1, octets + -(-octets // 255))


def _max_txt_octets():
    """The longest content whose record alone fits in a TXT answer."""
    n = TXT_ANSWER_LIMIT - RR_OVERHEAD
    while RR_OVERHEAD + txt_rdata_length(n) > TXT_ANSWER_LIMIT:
        n -= 1
    return n


TXT_MAX_OCTETS = _max_txt_octets()      # 64,986


def _txt(content):
    """TXT rdata: the UTF-8 text split into character-strings of at most 255 octets
    (a multi-byte character may straddle two strings: the strings are joined as bytes)."""
    raw = ("" if content is None else str(content)).encode("utf-8")
    if not raw:
        return b"\x00"
    if len(raw) > TXT_MAX_OCTETS:
        raise ValueError(f"TXT content of {len(raw)} bytes is longer than "
                         f"{TXT_MAX_OCTETS}, the most one DNS message can carry")
    out = bytearray()
    for i in range(0, len(raw), 255):
        chunk = raw[i:i + 255]
        out.append(len(chunk))
        out += chunk
    return bytes(out)


def _u32(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"bad SOA {name} {value!r}")
    return int(value) & 0xFFFFFFFF if name == "serial" else max(0, min(int(value), _MAX_TTL))


def _compile(origin, record):
    """(owner, type, ttl, rdata) of one record of the zone at `origin`; raises
    ValueError (and kin) on data that cannot be served."""
    rtype_name = str(record.get("type") or (record.get("record") or {}).get("kind") or "")
    rtype = TYPES.get(rtype_name.upper())
    if rtype is None:
        raise ValueError(f"type {rtype_name!r} is not served")
    data = record.get("record") or {}
    owner = _owner(origin, data.get("name", "@"))
    ttl = _ttl(record.get("ttl"))
    if rtype == A:
        address = str(data["address"]).strip()
        try:
            rdata = socket.inet_pton(socket.AF_INET, address)
        except OSError:
            raise ValueError(f"bad IPv4 address {address!r}") from None
    elif rtype == TXT:
        rdata = _txt(data.get("content"))
    elif rtype == NS:
        rdata = _host(data["content"])
    else:
        if owner != origin:
            raise ValueError("an SOA record must be at the apex (@)")
        numbers = {k: data.get(k) if data.get(k) is not None else v
                   for k, v in SOA_DEFAULTS.items()}
        tail = struct.pack("!5I", *(_u32(numbers[k], k) for k in
                                    ("serial", "refresh", "retry", "expire", "ttl")))
        rdata = (_host(data["primary_dns"]),
                 _mailbox(data.get("email") or data.get("rname"), origin), tail)
    return owner, rtype, ttl, rdata


def _nodata(zone):
    return Result(authority=[(zone.origin, zone.negative_soa)])


def _referral(zone, qname, qtype):
    """A referral if qname is at or below a delegation of this zone, else None."""
    # the highest cut on the way down from the apex wins
    cut = None
    name = qname
    origin = zone.origin
    while name != origin and len(name) > len(origin):
        if name in zone.cuts:
            cut = name
        name = name[name[0] + 1:]
    if cut is None or (cut == qname and qtype == DS):
        return None                 # DS of a child lives in the parent: answer here
    ns = zone.nodes[cut][NS]
    glue = []
    for target in ns.rdatas:
        types = zone.nodes.get(target)
        if types and A in types:
            glue.append((target, types[A]))
    return Result(aa=False, authority=[(cut, ns)], additional=glue)


# ---- wire format: queries ------------------------------------------------------------

class Query:
    __slots__ = ("id", "flags", "opcode", "qname_raw", "qname", "qtype", "qclass",
                 "edns", "payload", "do", "edns_version")

    def __init__(self):
        self.qname_raw = None       # the question name as sent (case kept)
        self.qname = None           # the same, lower case
        self.qtype = self.qclass = 0
        self.edns = False
        self.payload = UDP_PLAIN_LIMIT
        self.do = False
        self.edns_version = 0

    def __repr__(self):
        name = "-" if self.qname is None else to_text(self.qname)
        return f"<Query {self.id} {name} type {self.qtype} opcode {self.opcode}>"


def _skip_name(data, i):
    """Offset after a (possibly compressed) name starting at i."""
    while True:
        if i >= len(data):
            raise FormatError("name runs past the end")
        n = data[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        if n & 0xC0:
            raise FormatError("bad label type")
        i += n + 1


def parse_query(data):
    """A Query from wire bytes. DropQuery: no answer at all; FormatError: FORMERR."""
    if len(data) < 12:
        raise DropQuery("shorter than a header")
    q = Query()
    q.id, q.flags, qdcount, ancount, nscount, arcount = struct.unpack_from("!6H", data)
    if q.flags & QR:
        raise DropQuery("a response")
    q.opcode = (q.flags >> 11) & 0xF
    if qdcount != 1:
        if q.opcode != OPCODE_QUERY:
            return q                # NOTIMP, no question to echo
        raise FormatError(f"{qdcount} questions")
    # question: a name without compression (nothing precedes it to point to)
    i = 12
    end = len(data)
    while True:
        if i >= end:
            raise FormatError("question name runs past the end")
        n = data[i]
        if n == 0:
            i += 1
            break
        if n > 63:
            raise FormatError("compressed or bad label in the question")
        i += n + 1
    if i - 12 > 255:
        raise FormatError("question name too long")
    if i + 4 > end:
        raise FormatError("question cut short")
    q.qname_raw = data[12:i]
    q.qname = q.qname_raw.lower()
    q.qtype, q.qclass = struct.unpack_from("!HH", data, i)
    i += 4
    if q.opcode != OPCODE_QUERY:
        return q
    # answer and authority records are not expected in a query; skip them
    for section, count in ((0, ancount), (0, nscount), (1, arcount)):
        for _ in range(count):
            start = i
            i = _skip_name(data, i)
            if i + 10 > end:
                raise FormatError("record cut short")
            rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", data, i)
            i += 10 + rdlen
            if i > end:
                raise FormatError("rdata cut short")
            if section and rtype == OPT:
                if q.edns:
                    raise FormatError("more than one OPT record")
                if data[start] != 0:
                    raise FormatError("OPT owner is not the root")
                q.edns = True
                q.payload = rclass
                q.edns_version = (ttl >> 16) & 0xFF
                q.do = bool(ttl & 0x8000)
    return q


def _limit(query, tcp):
    if tcp:
        return TCP_LIMIT
    if query.edns:
        return max(UDP_PLAIN_LIMIT, min(query.payload, MAX_UDP_PAYLOAD))
    return UDP_PLAIN_LIMIT


# ---- wire format: responses ----------------------------------------------------------

class _Writer:
    """A message under construction, with name compression (RFC 1035 4.1.4)."""

    __slots__ = ("buf", "offsets")

    def __init__(self):
        self.buf = bytearray()
        self.offsets = {}       # lower-case wire suffix -> offset in buf

    def raw_name(self, raw, lower):
        """Write a name as given (the question keeps the asker's case, RFC 4343 / 0x20)
        and remember its suffixes under their lower-case form."""
        start = len(self.buf)
        self.buf += raw
        i = 0
        while lower[i]:
            self.offsets.setdefault(lower[i:], start + i)
            i += lower[i] + 1

    def name(self, wire):
        offsets, buf = self.offsets, self.buf
        while wire != _ROOT:
            at = offsets.get(wire)
            if at is not None:
                buf += struct.pack("!H", 0xC000 | at)
                return
            if len(buf) < 0x3FFF:
                offsets[wire] = len(buf)
            n = wire[0] + 1
            buf += wire[:n]
            wire = wire[n:]
        buf.append(0)

    def rrset(self, owner, rrset):
        buf = self.buf
        rtype = rrset.rtype
        head = struct.pack("!HHI", rtype, CLASS_IN, rrset.ttl)
        for rdata in rrset.rdatas:
            self.name(owner)
            buf += head
            at = len(buf)
            buf += b"\x00\x00"
            if rtype == NS:
                self.name(rdata)
            elif rtype == SOA:
                self.name(rdata[0])
                self.name(rdata[1])
                buf += rdata[2]
            else:
                buf += rdata
            struct.pack_into("!H", buf, at, len(buf) - at - 2)
        return len(rrset.rdatas)


def encode(query, result, limit):
    """Wire bytes of `result` as the answer to `query`, at most `limit` octets: if the
    additional section does not fit it is cut short; if answer and authority do not fit,
    both are left out and TC is set (RFC 2181 9), so the client retries over TCP.

    Over TCP (limit TCP_LIMIT) there is nothing to retry with: an ANY answer keeps as
    many of its RRsets as fit (RFC 8482 allows a subset); any other answer that cannot
    fit in one message (RRsets larger than the API lets one name have: data written
    around it, or two creations racing) is SERVFAIL rather than a TC the client cannot
    act on."""
    extra = list(result.additional)
    message = _encode(query, result, extra, False)
    while len(message) > limit and extra:
        extra.pop()
        message = _encode(query, result, extra, False)
    if len(message) > limit and limit >= TCP_LIMIT:
        answer = list(result.answer)
        while len(message) > limit and len(answer) > 1 and query.qtype == ANY:
            answer.pop()
            message = _encode(query, Result(result.rcode, result.aa, answer,
                                            result.authority), [], False)
        if len(message) > limit:
            return _encode(query, Result(SERVFAIL, aa=False), [], False)
        return message
    if len(message) > limit:
        message = _encode(query, result, [], True)
    return message


def _encode(query, result, additional, truncated):
    rcode = result.rcode
    flags = QR | (query.flags & (0x7800 | RD | CD)) | (rcode & 0xF)
    if result.aa:
        flags |= AA
    if truncated:
        flags |= TC
    w = _Writer()
    w.buf += b"\x00" * 12
    qdcount = ancount = nscount = arcount = 0
    if query.qname_raw is not None and rcode != FORMERR:
        w.raw_name(query.qname_raw, query.qname)
        w.buf += struct.pack("!HH", query.qtype, query.qclass)
        qdcount = 1
    if not truncated:
        for owner, rrset in result.answer:
            ancount += w.rrset(owner, rrset)
        for owner, rrset in result.authority:
            nscount += w.rrset(owner, rrset)
        for owner, rrset in additional:
            arcount += w.rrset(owner, rrset)
    if query.edns:
        # OPT: our payload size, extended RCODE, version 0, the DO bit copied (RFC 3225)
        ttl = ((rcode >> 4) << 24) | (0x8000 if query.do else 0)
        w.buf += _OPT_HEADER + struct.pack("!HIH", MAX_UDP_PAYLOAD, ttl, 0)
        arcount += 1
    struct.pack_into("!6H", w.buf, 0, query.id, flags, qdcount, ancount, nscount, arcount)
    return bytes(w.buf)


def error_response(data, rcode):
    """A bare header answering `data` with `rcode` (FORMERR, SERVFAIL), or None when the
    packet is too short to answer or is a response itself."""
    if len(data) < 12 or data[2] & 0x80:
        return None
    qid, flags = struct.unpack_from("!HH", data)
    flags = QR | (flags & (0x7800 | RD | CD)) | rcode
    return struct.pack("!6H", qid, flags, 0, 0, 0, 0)


def respond(index, data, tcp=False):
    """The response to the wire query `data`, or None if it gets none."""
    try:
        query = parse_query(data)
    except DropQuery:
        return None
    except FormatError:
        return error_response(data, FORMERR)
    return index.answer(query, tcp)
