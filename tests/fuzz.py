"""Schemathesis over the OpenAPI document a real server serves: every operation, positive
and negative cases, with two checks on every answer: no 5xx (`not_a_server_error`) and the
body matches the documented schema of its status (`response_schema_conformance`).

Used by tests/api/test_fuzz.py (bounded, deterministic) and tests/bench/bench_fuzz.py
(10,000 requests and more, random).

The fuzzer works as its own user, `fuzzer-<hex>`, bound to the admin role globally, so
the bootstrap admin is never the one at risk. Generated path parameters are random, yet
the run guards its own user and binding anyway (a case aimed at either is skipped), and
it logs in again when its token stops working (the logout operation revokes it). Each
operation on an item also gets cases aimed at a record that exists (the newest of its
collection), outside IAM, so that updates and actions are tried on real state.
"""

import collections
import re
import secrets
import uuid

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.apiserver import TOKEN_PATH, Client

CHECKS = [not_a_server_error, response_schema_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
LOGOUT = "/v1/iam/clients/{client}/actions/logout/invoke"


class Stats:
    def __init__(self):
        self.requests = 0
        self.server_errors = 0
        self.skipped = 0
        self.relogins = 0
        self.by_status = collections.Counter()
        self.operations = set()      # labels of the operations that got a request
        self.failures = {}      # (operation, first line) -> reproduction

    def add(self, other):
        self.requests += other.requests
        self.server_errors += other.server_errors
        self.skipped += other.skipped
        self.relogins += other.relogins
        self.by_status.update(other.by_status)
        self.operations |= other.operations
        self.failures.update(other.failures)

    def report(self):
        return (f"{self.requests} requests, {self.server_errors} server errors, "
                f"{len(self.failures)} distinct check failures, {self.relogins} re-logins, "
                f"statuses {dict(sorted(self.by_status.items()))}")


class Fuzzer:
    def __init__(self, host, port, admin_password):
        self.base_url = f"http://{host}:{port}"
        self.client = Client(host, port)
        admin = self.client.with_token(self._token("admin", admin_password))
        self.username = f"fuzzer-{uuid.uuid4().hex[:8]}"
        self.password = secrets.token_urlsafe(24)
        user = admin.post("/v1/iam/users", {"username": self.username,
                                            "password": self.password})
        assert user.status == 201, user
        role = admin.get("/v1/iam/roles", query={"name": "admin"}).json[0]["uuid"]
        binding = admin.post("/v1/iam/role_bindings", {"user": user.json["uuid"], "role": role})
        assert binding.status == 201, binding
        self.guarded = {user.json["uuid"], binding.json["uuid"]}
        self.login()
        self.schema = schemathesis.openapi.from_url(f"{self.base_url}/v1/openapi.json")
        self.operations = [result.ok() for result in self.schema.get_all_operations()]
        self.session = requests.Session()

    def _token(self, username, password):
        resp = self.client.post(TOKEN_PATH, {"grant_type": "password", "username": username,
                                             "password": password})
        assert resp.status == 200, resp
        return resp.json["access_token"]

    def login(self):
        self.token = self._token(self.username, self.password)

    def run(self, examples, modes=MODES, derandomize=False, stats=None, only=None):
        """`examples` cases per operation and mode; `only`: labels of the operations to
        run ("GET /v1/iam/users"), all when None."""
        stats = stats or Stats()
        for operation in self.operations:
            if only is not None and operation.label not in only:
                continue
            known = self._existing_records(operation)
            for mode in modes:
                self._run_operation(operation, mode, examples, derandomize, stats)
                if known:
                    self._run_operation(operation, mode, examples, derandomize, stats, known)
        return stats

    def _existing_records(self, operation):
        """Path parameters naming records that exist, so that cases get past the 404.
        Never IAM records: a random body on the admin's user or bindings is how an
        admin gets locked out."""
        if "{" not in operation.path or operation.path.startswith("/v1/iam/"):
            return None
        params = {}
        for match in re.finditer(r"\{(\w+)\}", operation.path):
            collection = operation.path[:match.start()].rstrip("/").format(**params)
            listed = self.session.get(self.base_url + collection, timeout=60,
                                      headers={"Authorization": f"Bearer {self.token}"})
            # a path parameter under something that is no JSON list (the console's files)
            # is not a record's
            if listed.status_code != 200 or "json" not in listed.headers.get(
                    "Content-Type", "") or not listed.json():
                return None
            items = listed.json()
            if isinstance(items, dict):     # spec 4.4's {"versions": [...]}
                items = items.get("versions") or []
            if not items:
                return None
            params[match.group(1)] = items[-1]["uuid"]
        return params

    def _run_operation(self, operation, mode, examples, derandomize, stats, known=None):
        @settings(max_examples=examples, deadline=None, database=None,
                  derandomize=derandomize, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
        @given(case=operation.as_strategy(generation_mode=mode, path_parameters=known))
        def one(case):
            self._send(case, stats)
        try:
            one()
        except Unsatisfiable:       # nothing to vary, e.g. negative cases of a bare GET
            stats.skipped += 1

    def _send(self, case, stats):
        if self.guarded & {str(v).lower() for v in (case.path_parameters or {}).values()}:
            stats.skipped += 1
            return
        response = self._call(case)
        if response.status_code == 401 and self._sent_our_token(response) and \
                self._token_revoked():
            stats.relogins += 1
            self.login()
            response = self._call(case)
        stats.requests += 1
        stats.operations.add(case.operation.label)
        stats.by_status[response.status_code] += 1
        stats.server_errors += response.status_code >= 500
        if case.operation.path == LOGOUT and response.status_code == 204:
            stats.relogins += 1
            self.login()
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as e:
            first = str(e).strip().splitlines()[0]
            key = (case.operation.label, first)
            if key not in stats.failures:
                stats.failures[key] = f"{first}\n{case.as_curl_command()}\n" \
                                      f"-> {response.status_code} {response.text[:300]}"

    def _call(self, case):
        return case.call(base_url=self.base_url, session=self.session, timeout=60,
                         headers={"Authorization": f"Bearer {self.token}"})

    def _sent_our_token(self, response):
        # negative cases may leave the header out or break it on purpose
        return response.request.headers.get("Authorization") == f"Bearer {self.token}"

    def _token_revoked(self):
        probe = self.session.get(f"{self.base_url}/v1/iam/clients/default/actions/introspect",
                                 headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        return probe.status_code == 401


def failure_text(stats, limit=20):
    items = list(stats.failures.items())[:limit]
    return "\n\n".join(f"{op}: {text}" for (op, _), text in items)
