import faulthandler


def pytest_runtest_setup(item):
    """Image builds and TCG boots take minutes by design: the suite-wide stack dump after
    45 s (faulthandler_timeout, meant to catch a hung request) would only be noise here.
    Cancelled before the fixtures (a module's VM boots in its first test's set-up); the
    tests keep their own bounds (pytest-timeout and every wait_for's timeout)."""
    faulthandler.cancel_dump_traceback_later()
