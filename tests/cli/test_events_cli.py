"""`appliance events [--follow]` against a real API (appliance/cli/events.py)."""

import io
import json
import time

import pytest

from appliance.cli.common import Environment
from appliance.cli.main import program


def test_recent_events_one_readable_line_each(logged_in):
    logged_in("create", "iam/projects", "name=ev-cli-one")
    result = logged_in("events")
    assert result.code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    made = [line for line in lines if "Project ev-cli-one" in line]
    assert len(made) == 1
    assert "created" in made[0] and "by user admin" in made[0] and "request " in made[0]


def test_json_one_object_a_line_and_the_kind_filter(logged_in):
    logged_in("create", "iam/projects", "name=ev-cli-two")
    result = logged_in("events", "--json", "--kind", "iam_projects")
    assert result.code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert events and {e["kind"] for e in events} == {"iam_projects"}
    assert any(e["name"] == "ev-cli-two" and e["type"] == "created" for e in events)
    sent = logged_in.transport.to("/v1/events")[-1]
    assert ("kind", "iam_projects") in sent.query and ("follow", "false") in sent.query


def test_a_bad_kind_is_the_servers_refusal(logged_in):
    result = logged_in("events", "--kind", "no_such_kind")
    assert result.code == 1
    assert "no resource kind no_such_kind" in result.stderr


class Interrupting:
    """The real transport; after `stop_after` requests to /v1/events, Ctrl-C (what a user
    does to end --follow). `between` runs after the first one: a write while following."""

    def __init__(self, inner, between, stop_after=3):
        self.inner, self.between, self.stop_after = inner, between, stop_after
        self.calls = 0

    def __call__(self, method, url, headers, body, timeout, **trust):
        if "/v1/events" in url:
            self.calls += 1
            if self.calls == 2:
                self.between()
            if self.calls > self.stop_after:
                raise KeyboardInterrupt
        return self.inner(method, url, headers, body, timeout, **trust)


def test_follow_prints_what_happens_meanwhile(logged_in):
    stdout, stderr = io.StringIO(), io.StringIO()

    def write_meanwhile():
        logged_in("create", "iam/projects", "name=ev-cli-followed")

    transport = Interrupting(logged_in.transport, write_meanwhile)
    env = Environment(stdin=io.StringIO(""), stdout=stdout, stderr=stderr,
                      config_dir=logged_in.config_dir, environ=dict(logged_in.environ),
                      transport=transport, getpass=lambda prompt: "", stdin_isatty=False,
                      stdout_isatty=False, clock=time.time, ask=None)
    started = time.monotonic()
    # --timeout 8: each long poll waits 3 s (timeout - 5), not the default's 20; the asks
    # that see nothing new (the last, and the first of a module run alone) end on that wait
    with pytest.raises(KeyboardInterrupt):
        program(["events", "--follow", "--json", "--kind", "iam_projects", "--timeout", "8"],
                env)
    names = [json.loads(line)["name"] for line in stdout.getvalue().splitlines()]
    assert names.count("ev-cli-followed") == 1
    # each later ask starts after the last revision it was told: nothing twice
    sent = [dict(s.query) for s in logged_in.transport.to("/v1/events")][-3:]
    assert all("since" in q and q.get("wait") for q in sent[1:])
    assert time.monotonic() - started < 120
