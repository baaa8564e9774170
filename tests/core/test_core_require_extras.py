"""`require` and EMBODIED_REQUIRE_EXTRAS: a missing extra skips one test, or fails under CI.

Each case runs a small test file in an inner pytest session (pytester) that loads the
project's ``tests/conftest.py`` as a plugin, with and without the variable.
"""

from __future__ import annotations

import pytest

from tests.conftest import REQUIRE_EXTRAS_VAR

MISSING = "embodied_no_such_module_for_tests"

TESTS = f'''
import pytest
from tests.conftest import require

def test_needs_missing_module():
    require("{MISSING}")

def test_needs_nothing():
    assert require("json").dumps([1]) == "[1]"

@pytest.mark.skip(reason="marked skip")
def test_marked_skip():
    pass

def test_skip_call():
    pytest.skip("skipped at run time")

@pytest.fixture
def needs_missing():
    require("{MISSING}")

def test_fixture_needs_missing_module(needs_missing):
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
'''

MODULE_SKIP = f'''
import pytest
pytest.importorskip("{MISSING}")

def test_never_collected():
    pass
'''


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, required: str | None
) -> pytest.RunResult:
    if required is None:
        monkeypatch.delenv(REQUIRE_EXTRAS_VAR, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_EXTRAS_VAR, required)
    pytester.makeconftest('pytest_plugins = ["tests.conftest"]\n')
    pytester.makepyfile(test_inner=source)
    # in process: the hooks read the variable when they run, so monkeypatch.setenv reaches them
    return pytester.runpytest("-rA", "-p", "no:cacheprovider")


@pytest.mark.parametrize("value", [None, "", "0"])
def test_without_the_variable_a_missing_module_skips_only_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    result = _run(pytester, monkeypatch, TESTS, value)
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"*{MISSING} is not installed*"])


def test_under_the_variable_every_skip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, TESTS, "1")
    # the two missing-module tests (in the test and in a fixture) and both plain skips fail;
    # the test that needs nothing passes, the strict xfail keeps its outcome
    # (a skip mark and a fixture act at setup, so those two are reported as errors)
    result.assert_outcomes(passed=1, failed=2, errors=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for line in (
        "FAILED *::test_needs_missing_module - Failed: *",
        "ERROR *::test_fixture_needs_missing_module - Failed: *",
        f"*{MISSING} is not installed*{REQUIRE_EXTRAS_VAR}=1: a missing dependency is a failure",
        "ERROR *::test_marked_skip - *",
        f"{REQUIRE_EXTRAS_VAR}=1 forbids skips: Skipped: marked skip",
        "FAILED *::test_skip_call - *",
        f"{REQUIRE_EXTRAS_VAR}=1 forbids skips: Skipped: skipped at run time",
    ):
        result.stdout.fnmatch_lines([line])


def test_under_the_variable_a_module_level_importorskip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    skipped = _run(pytester, monkeypatch, MODULE_SKIP, None)
    skipped.assert_outcomes(skipped=1)
    assert skipped.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    failed = _run(pytester, monkeypatch, MODULE_SKIP, "1")
    failed.assert_outcomes(errors=1)
    assert failed.ret == pytest.ExitCode.INTERRUPTED  # "1 error during collection"
    failed.stdout.fnmatch_lines([f"*{REQUIRE_EXTRAS_VAR}=1 forbids skips*{MISSING}*"])
