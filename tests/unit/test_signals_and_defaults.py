"""`--signal` names, and the server's `--preemptible-default` (issue 15)."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.signals import parse_signal, signal_name
from gpuyard.domain.spec_rules import SpecDraft, decide_spec
from gpuyard.settings import Settings


@pytest.mark.parametrize("text", ["USR1", "usr1", "SIGUSR1", "10", " 10 ", 10])
def test_a_signal_by_name_or_number(text: str | int) -> None:
    assert parse_signal(text) == 10


@pytest.mark.parametrize(
    ("text", "says"),
    [("STOP", "not a signal that stops a job"), ("CONT", "not a signal that stops a job"),
     ("0", "not a signal that stops a job"), ("99", "not a signal that stops a job"),
     ("FOO", "is not a signal"), ("B:USR1@60", "only the signal"), ("USR1@90", "only the signal")],
)  # fmt: skip
def test_anything_else_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says) as refused:
        parse_signal(text)
    assert "\n" not in refused.value.message


def test_signal_names_for_show() -> None:
    assert (signal_name(15), signal_name(10)) == ("SIGTERM", "SIGUSR1")


def test_a_submission_that_does_not_say_takes_the_servers_default() -> None:
    said_nothing = SpecDraft(argv=("x",))
    assert decide_spec(said_nothing, default_workdir="/").preemptible is False
    assert decide_spec(said_nothing, default_workdir="/", default_preemptible=True).preemptible
    said_no = SpecDraft(argv=("x",), preemptible=False)
    assert not decide_spec(said_no, default_workdir="/", default_preemptible=True).preemptible
    with pytest.raises(InvalidRequest, match="stop_signal 19"):
        decide_spec(SpecDraft(argv=("x",), stop_signal=19), default_workdir="/")


def test_the_server_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().preemptible_default is False
    monkeypatch.setenv("GPUYARD_PREEMPTIBLE_DEFAULT", "yes")
    assert Settings.from_env().preemptible_default is True
    monkeypatch.setenv("GPUYARD_PREEMPTIBLE_DEFAULT", "maybe")
    with pytest.raises(ValueError, match="GPUYARD_PREEMPTIBLE_DEFAULT='maybe' is not a valid bool"):
        Settings.from_env()
