"""Sizes and durations as users type them (`--mem 16G`, `--time 2-12:00:00`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.units import (
    MAX_DURATION_S,
    format_duration,
    parse_duration_s,
    parse_size_mib,
)

# -- sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("16G", 16 * 1024),
        ("16g", 16 * 1024),
        ("16GB", 16 * 1024),
        ("16GiB", 16 * 1024),
        ("512M", 512),
        ("512MiB", 512),
        ("1.5GiB", 1536),
        ("1.5G", 1536),
        ("2048", 2048),  # bare number is MiB, like Slurm's --mem
        ("1T", 1024 * 1024),
        ("2048K", 2),
        (" 8G ", 8 * 1024),
    ],
)
def test_parse_size_mib_accepts_slurm_forms(text: str, mib: int) -> None:
    assert parse_size_mib(text) == mib


def test_parse_size_mib_never_rounds_a_positive_request_down_to_zero() -> None:
    # 1K is 1/1024 MiB: a positive request must not become "no memory limit asked".
    assert parse_size_mib("1K") == 1


@pytest.mark.parametrize(
    "text", ["", "abc", "G", "-1G", "1.5.5G", "16X", "1e3M", "GiB16", "16 G B"]
)
def test_parse_size_mib_rejects_garbage_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_size_mib(text, field="mem")
    assert info.value.field == "mem"
    assert repr(text) in info.value.message


def test_parse_size_mib_reports_the_callers_field() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_size_mib("lots", field="gpu_mem")
    assert info.value.field == "gpu_mem"


def test_parse_size_mib_reads_a_lone_b_as_bytes_rounded_up_to_a_mib() -> None:
    assert parse_size_mib("3221225472B") == 3072
    assert parse_size_mib("2048B") == 1  # a positive request never becomes 0


# -- durations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90 * 60),  # bare number: minutes, as in sbatch --time
        ("1", 60),
        ("1:30", 90),  # MM:SS
        ("05:00", 300),
        ("1:30:00", 5400),  # HH:MM:SS
        ("2-12", 2 * 86400 + 12 * 3600),  # D-HH
        ("2-12:30", 2 * 86400 + 12 * 3600 + 30 * 60),  # D-HH:MM
        ("2-12:30:15", 2 * 86400 + 12 * 3600 + 30 * 60 + 15),  # D-HH:MM:SS
        ("0-00:00:01", 1),
        ("30s", 30),
        ("90m", 5400),
        ("2h", 7200),
        ("1d", 86400),
        ("1.5h", 5400),
        ("2H", 7200),
        (" 2h ", 7200),
    ],
)
def test_parse_duration_s_accepts_slurm_forms(text: str, seconds: int) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "0:00", "00:00:00", "0-0", "0-00:00:00", "0d"])
def test_parse_duration_s_rejects_zero(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_duration_s(text, field="time_limit")
    assert info.value.field == "time_limit"


@pytest.mark.parametrize(
    "text",
    [
        *("-5", "-1h", "", "abc", "h", "1:2:3:4", "1-", "2-", "1-2:3:4:5", "1--2"),
        *("1:", "::", "1h30m", "1e3", "1.5", "1 h", "²"),
    ],
)
def test_parse_duration_s_rejects_negative_and_garbage(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_duration_s(text, field="time")
    assert info.value.field == "time"


@pytest.mark.parametrize("text", ["1:99:99", "1:60:00", "1:00:60", "1:60", "2-25", "2-24",
                                  "2-23:60", "2-1:00:60", "0-24:00:00"])  # fmt: skip
def test_parse_duration_s_refuses_clock_fields_out_of_range(text: str) -> None:
    """`1:99:99` is a typo, not 2 h 40 min; `2-25` is not 3 days 1 hour."""
    with pytest.raises(InvalidRequest, match="go up to 59, hours after a day up to 23"):
        parse_duration_s(text)


@pytest.mark.parametrize(("text", "seconds"), [("90:00", 5400), ("100:00:00", 360000),
                                               ("2-23:59:59", 259199)])  # fmt: skip
def test_parse_duration_s_leading_field_may_run_over(text: str, seconds: int) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(("text", "seconds"), [("0.4s", 1), ("0.0001h", 1), ("1.5s", 2)])
def test_parse_duration_s_rounds_fractions_up_never_to_zero(text: str, seconds: int) -> None:
    # 0 would mean "no time limit" to the executor and the CLI.
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(("text", "seconds"), [("1.1h", 3960), ("8.3m", 498), ("1.1d", 95040)])
def test_parse_duration_s_decimal_units_are_exact(text: str, seconds: int) -> None:
    assert parse_duration_s(text) == seconds


# -- formatting ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0:00"),
        (59, "0:59"),
        (90, "1:30"),
        (3599, "59:59"),
        (3600, "1:00:00"),
        (86399, "23:59:59"),
        (86400, "1-00:00:00"),
        (90061, "1-01:01:01"),
        (59.9, "0:59"),
        (-5, "0:00"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=1, max_value=MAX_DURATION_S))
def test_format_duration_reads_back_with_parse_duration(seconds: int) -> None:
    # What `gpuyard show` prints can be pasted back into `--time`.
    assert parse_duration_s(format_duration(seconds)) == seconds


def test_limits_over_a_year_and_absurd_sizes_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="over a year"):
        parse_duration_s("367d")
    with pytest.raises(InvalidRequest, match="too long"):
        parse_duration_s("1" * 400 + "d")
    with pytest.raises(InvalidRequest, match="too large"):
        parse_size_mib("1" * 400 + "G")
    with pytest.raises(InvalidRequest, match="larger than any machine"):
        parse_size_mib("2048P")
