"""The fuzzer (tests/fuzz.py) over every operation of the served OpenAPI document, bounded
for `make test`: a few positive and negative cases per operation, the same ones on every
run (derandomized), so that a failure here is reproducible. `make bench` (bench_fuzz)
runs 10,000 random requests and more."""

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.fuzz import Fuzzer, failure_text

EXAMPLES = 3        # per operation and mode; well under a minute on 2 cores


def test_fuzzing_every_operation_finds_no_server_error_and_no_schema_mismatch(server):
    fuzzer = Fuzzer(server.host, server.port, ADMIN_PASSWORD)
    stats = fuzzer.run(EXAMPLES, derandomize=True)
    print(stats.report())
    assert stats.operations == {op.label for op in fuzzer.operations}, \
        "operations never reached: %s" % ({op.label for op in fuzzer.operations} -
                                           stats.operations)
    assert stats.server_errors == 0 and not stats.failures, failure_text(stats)
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
