import faulthandler

import pytest


@pytest.fixture(autouse=True)
def _no_stack_dump_at_45_s():
    """Image builds and TCG boots take minutes by design: the suite-wide stack dump after
    45 s (faulthandler_timeout, meant to catch a hung request) would only be noise here.
    The tests keep their own bounds (pytest-timeout and every wait_for's timeout)."""
    faulthandler.cancel_dump_traceback_later()
    yield
