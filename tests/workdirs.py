"""A work directory that a fixture removes once its tests are done, unless one of them
failed: the VM and image fixtures hold gigabytes (overlays, state disks, image caches)
that the rest of a run does not need (docs/testing.md, "Disk"), and a failure's files are
what one looks at next."""

import contextlib
import shutil


@contextlib.contextmanager
def removed_unless_failed(tmp_path_factory, request, basename):
    """A new directory under the run's base (a Path), removed at the end of the `with`
    when no test of the session failed meanwhile."""
    path = tmp_path_factory.mktemp(basename)
    failed_before = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)
