"""Parsing and formatting of sizes (MiB) and durations (seconds) the way Slurm users write them."""

from __future__ import annotations

import math
import re

from gpuyard.domain.errors import InvalidRequest

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?B?)\s*$", re.IGNORECASE)
MAX_SIZE_MIB = 1024**3  # 1 PiB
MAX_DURATION_S = 366 * 86400  # a year: longer limits are typos, and overflow timers
_SIZE_FACTOR_MIB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def parse_size_mib(text: str, *, field: str = "mem") -> int:
    """Parse '16G', '512MiB', '1.5GiB', '2048' (MiB, like Slurm's --mem) into whole MiB."""
    match = _SIZE_RE.match(text)
    if not match:
        raise InvalidRequest(
            f"bad size {text!r}: use a number with an optional unit, e.g. 512M, 16G, 1.5GiB",
            field=field,
        )
    number, unit, suffix = match.groups()
    if len(number) > 15:
        raise InvalidRequest(f"size {text!r} is too large", field=field)
    if not unit and suffix.upper() == "B":
        mib = float(number) / 2**20  # a lone B means bytes
    else:
        mib = float(number) * _SIZE_FACTOR_MIB[(unit or "M").upper()]
    if mib > MAX_SIZE_MIB:
        raise InvalidRequest(f"size {text!r} is larger than any machine (1 PiB)", field=field)
    return max(1, round(mib)) if float(number) > 0 else 0


# A bare --mem below this many MiB is most likely gigabytes written without their unit.
_BARE_MEM_HINT_BELOW_MIB = 1024


def bare_size_hint(text: str | None, flag: str = "--mem") -> str | None:
    """Advice when a size was written without a unit and is small enough to be a slip:
    `--mem 16` is 16 MiB, as sbatch reads it, which no training job fits in (None: no
    advice)."""
    if text is None:
        return None
    match = _SIZE_RE.match(text)
    if match is None or match.group(2) or match.group(3):
        return None
    number = match.group(1)
    if not 0 < float(number) < _BARE_MEM_HINT_BELOW_MIB:
        return None
    return (f"{flag} {text.strip()} is {number} MiB (a number without a unit is MiB, as sbatch "
            f"reads it); did you mean {flag} {number}G?")  # fmt: skip


_SUFFIX_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_UNIT_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_duration_s(text: str, *, field: str = "time") -> int:
    """Parse Slurm time formats ('90', '1:30:00', '2-12', '2-12:00:00') or '30s', '2h', '1d'.

    A bare number is minutes, as in `sbatch --time`.
    """
    raw = text.strip().lower()
    if len(raw) > 32:
        raise InvalidRequest(f"bad duration {text[:40]!r}...: too long", field=field)
    try:
        unit_match = _UNIT_RE.match(raw)
        if unit_match:
            seconds = float(unit_match.group(1)) * _SUFFIX_S[unit_match.group(2)]
        else:
            seconds = _parse_slurm_time(raw)
    except _OutOfRange:
        raise InvalidRequest(
            f"bad duration {text!r}: minutes and seconds after a colon go up to 59, hours "
            "after a day up to 23 ([D-]HH:MM:SS)",
            field=field,
        ) from None
    except ValueError:
        raise InvalidRequest(
            f"bad duration {text!r}: use minutes, [D-]HH:MM:SS, or 30s/90m/2h/1d",
            field=field,
        ) from None
    if not seconds > 0:
        raise InvalidRequest(f"duration {text!r} must be positive", field=field)
    if seconds > MAX_DURATION_S:
        raise InvalidRequest(f"duration {text!r} is over a year; ask for less", field=field)
    return max(1, math.ceil(round(seconds, 6)))  # never round a positive limit down to "no limit"


class _OutOfRange(ValueError):
    """A clock field past its range (`1:99:99`, `2-25`): a typo, not a longer limit."""


def _parse_slurm_time(raw: str) -> float:
    days = 0
    if "-" in raw:
        day_text, raw = raw.split("-", 1)
        days = _nonneg_int(day_text)
        parts = [_nonneg_int(p) for p in raw.split(":")]
        # With days, the rest is hours[:minutes[:seconds]].
        while len(parts) < 3:
            parts.append(0)
        if len(parts) != 3:
            raise ValueError(raw)
        hours, minutes, seconds = parts
        if hours > 23:
            raise _OutOfRange(raw)
    else:
        parts = [_nonneg_int(p) for p in raw.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        elif len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            raise ValueError(raw)
    # The leading field may run over (`90:00` is 90 minutes); the ones after a colon may not.
    if (len(parts) == 3 and minutes > 59) or (len(parts) > 1 and seconds > 59):
        raise _OutOfRange(raw)
    return float(days * 86400 + hours * 3600 + minutes * 60 + seconds)


def _nonneg_int(text: str) -> int:
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def format_duration(seconds: float | None) -> str:
    """Format seconds as Slurm does: [D-]HH:MM:SS (or M:SS under an hour)."""
    if seconds is None:
        return "-"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_size_mib(mib: int | None) -> str:
    """Format MiB as a short human size (e.g. 16G, 512M)."""
    if not mib:
        return "-"
    if mib >= 1024 and mib % 1024 == 0:
        return f"{mib // 1024}G"
    if mib >= 1024:
        return f"{mib / 1024:.1f}G"
    return f"{mib}M"
