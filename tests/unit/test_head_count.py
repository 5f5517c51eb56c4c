"""The session's Ray-head counter charges each head to the test module that started it."""

from __future__ import annotations

import pytest

from tests.fixtures.head_count import MARKER_ENV, HeadCounter, _module_of

pytestmark = pytest.mark.unit


def test_a_head_is_charged_to_the_module_in_pytest_current_test():
    environ = [b"PATH=/bin", b"PYTEST_CURRENT_TEST=tests/integration/test_cli.py::test_run (call)", b"X=1"]

    assert _module_of(environ) == "tests/integration/test_cli.py"
    assert _module_of([b"PATH=/bin"]) == "?"  # started outside any test


def test_modules_are_listed_most_heads_first():
    counter = HeadCounter(marker="m")
    counter._seen.update({(1, "a"): "tests/a.py", (2, "b"): "tests/b.py", (3, "c"): "tests/b.py"})

    assert counter.count == 3
    assert counter.by_module() == [("tests/b.py", 2), ("tests/a.py", 1)]
    assert MARKER_ENV == "ARP_TEST_SESSION"
