"""Runs last in tests/secret (file order): no secret value in any log of the run so far.

Every module before it that handles secret values registers them with `remember()`;
tests/conftest.py sends every in-process log (API, access log, store) to RUN_LOG_DIR and
daemon processes write their stderr there.
"""

import os

from tests.conftest import RUN_LOG_DIR, SECRET_VALUES


def test_no_secret_value_in_any_log():
    assert SECRET_VALUES, "the secret tests registered no value: nothing was checked"
    logs = [os.path.join(RUN_LOG_DIR, n) for n in os.listdir(RUN_LOG_DIR)]
    assert any("delivery" in n for n in logs), "no daemon log to check"
    checked = 0
    for path in logs:
        with open(path, errors="replace") as f:
            text = f.read()
        checked += len(text)
        for value in SECRET_VALUES:
            # the shortest needle that still identifies a value (long keys: one line)
            needle = max(value.splitlines(), key=len) if "\n" in value else value
            assert needle not in text, f"a secret value appears in {os.path.basename(path)}"
    assert checked > 10000, "the logs are suspiciously small"
