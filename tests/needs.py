"""What a test needs from the machine (a tool, root, a package, data beside the repository):
where it is missing the test skips, except under CI (`.ci/run` sets CI=1), where a skip would
hide that the suite did not run what it claims, so it fails instead."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing(why: str, tests: str, fix: str = "") -> NoReturn:
    """Skip for `why`; under CI fail, saying that `tests` must run (and `fix`, how)."""
    if in_ci():
        how = f": {fix}" if fix else ""
        pytest.fail(f"{why}; CI is set, so {tests} must run{how}", pytrace=False)
    pytest.skip(why)
