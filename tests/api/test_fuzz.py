"""The fuzzer (tests/fuzz.py) over every operation of the served OpenAPI document, bounded
for `make test`: a few positive and negative cases per operation, the same ones on every
run (derandomized), so that a failure here is reproducible. `make bench` (bench_fuzz)
runs 10,000 random requests and more."""

import faulthandler

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.fuzz import Fuzzer, Stats, failure_text

EXAMPLES = 3        # per operation and mode: about a minute in all on 2 cores
# one test per part of the API, so that each stays well within the per-test watchdog
PARTS = ["/v1/iam/", "/v1/secret/", "/v1/vs/", "/v1/dns/", "/v1/em/", "/v1/repo/"]


@pytest.fixture(scope="module")
def fuzzer(server):
    return Fuzzer(server.host, server.port, ADMIN_PASSWORD)


@pytest.fixture(scope="module")
def stats():
    return Stats()


def part_of(operation):
    return next((p for p in PARTS if operation.path.startswith(p)), "other")


@pytest.mark.parametrize("part", PARTS + ["other"])
def test_fuzzing_finds_no_server_error_and_no_schema_mismatch(fuzzer, stats, part):
    # a part takes 15-30 s, past the suite's 45 s stack dump on a loaded machine; the dump
    # of every thread while hypothesis runs once ended the run in a segfault (the test
    # keeps pytest-timeout's bound)
    faulthandler.cancel_dump_traceback_later()
    only = {op.label for op in fuzzer.operations if part_of(op) == part}
    assert only, f"no operation under {part}"
    found = Stats()
    fuzzer.run(EXAMPLES, derandomize=True, only=only, stats=found)
    stats.add(found)
    print(found.report())
    assert found.server_errors == 0 and not found.failures, failure_text(found)


def test_fuzzing_reached_every_operation_and_left_the_admin_alone(server, fuzzer, stats):
    missed = {op.label for op in fuzzer.operations} - stats.operations
    assert not missed, f"operations never reached: {missed}"
    # the fuzzer ran as its own user: the bootstrap admin still logs in and sees everything
    admin = server.client(server.login("admin", ADMIN_PASSWORD))
    assert admin.get("/v1/iam/users").status == 200


def bait(api):
    """Two routes that are wrong on purpose: the fuzzer must catch both."""
    def crash(call):
        raise ZeroDivisionError("a bug")

    api.route("POST", "/v1/bait/crash", crash, permission="iam.user.read",
              request_schema={"type": "object"}, response_schema={"type": "object"})
    api.route("GET", "/v1/bait/liar", lambda call: {"name": 5}, permission="iam.user.read",
              response_schema={"type": "object", "required": ["name"],
                               "properties": {"name": {"type": "string"}}})


def test_the_fuzzer_catches_a_server_error_and_a_schema_mismatch(tmp_path):
    """The checks are live: a route that crashes and one whose answer contradicts its
    documented schema are both reported, with a curl line to reproduce them."""
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, extra=bait).start()
    try:
        fuzzer = Fuzzer(srv.host, srv.port, ADMIN_PASSWORD)
        stats = fuzzer.run(EXAMPLES, derandomize=True,
                           only={"POST /v1/bait/crash", "GET /v1/bait/liar"})
    finally:
        srv.stop()
    assert stats.server_errors >= 1
    failed = {operation for operation, _ in stats.failures}
    assert failed == {"POST /v1/bait/crash", "GET /v1/bait/liar"}, failure_text(stats)
    assert all("curl" in text for text in stats.failures.values())
