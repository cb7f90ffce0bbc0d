"""make test's schedule: the files tests/conftest.py hands out first are files of this suite (a file
renamed or moved would silently drop out of LONGEST_FIRST, and the longest would run last again)."""

from __future__ import annotations

from helpers import LONGEST_FIRST, REPO


def test_the_files_run_first_exist():
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert missing == [], f"tests/conftest.py LONGEST_FIRST names files that are not there: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
