"""Waiting for a condition in tests: poll, and fail with what was awaited."""

import time


def eventually(check, seconds, what="", interval=0.02):
    """The first truthy value of check(), polled every `interval` s; AssertionError naming
    `what` when `seconds` pass without one."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(interval)
