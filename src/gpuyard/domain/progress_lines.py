"""Progress read from what a job writes: the SDK's JSON lines and the job's own output.

Formats read from the log (anything else is ignored, as is any line that does not parse):
- the protocol, for any language, exactly `::gpuyard progress step=10 total=100 loss=0.31`:
  `step` and `total` are whole numbers, every other `key=value` a metric (a number); a line
  with a malformed pair is ignored whole. torchrun's `[rankN]: ` label in front is allowed,
  and a multi-node job's `[nodeN] ` before it (its one log's label of each machine's lines).
- tqdm bars, `\\r`-separated updates included: `desc:  45%|####5     | 45/100 [00:12<00:15,
  3.61it/s, loss=0.3]` (the `n/total` pair; postfix `key=value` numbers become metrics) and
  bars without a total (`45it [00:12, 3.61it/s]`: step only). Counts scaled by tqdm's
  `unit_scale` (`1.20k/10.0k`, `45.0/100`, `3.40M/12.0M`) are read at the precision printed
  (`1.20k` is 1200; with `unit_divisor=1024` it was 1229, but the fraction is the same).
- PyTorch Lightning's bars: `TQDMProgressBar`'s, a tqdm bar whose description is `Epoch N`,
  and `RichProgressBar`'s rows (`domain/progress_rich.py`: what Rich writes to a file and to a
  terminal, wrapped metrics included). Its other loops' bars (validation, sanity checking,
  testing, prediction) are not the training's progress.
- Hugging Face Trainer's logged dicts (a literal dict holding `epoch`, as Trainer logs every
  time): transformers 5 prints floats as strings, `{'loss': '0.4321', 'grad_norm': '1.23',
  'learning_rate': '4.9e-05', 'epoch': '0.5'}`, transformers 4 as numbers, `{'loss': 0.31,
  'epoch': 0.5}`; both are metrics without a step (its progress bar is a tqdm bar).
Terminal control sequences (colours, erase, cursor moves) are dropped before a line is read.
Nested bars are not told apart: the latest update of any bar wins.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field

from gpuyard.domain import progress_rich

MAX_METRICS = 64
MAX_NAME_CHARS = 64
MAX_LINE_CHARS = 8192  # longer lines are not progress
MAX_STEP = 2**62

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]{0,63}\Z")
_PROTOCOL = re.compile(
    r"(?:\[node\d+\]\s*)?(?:\[rank\d+\]:?\s*)?::gpuyard progress(?:[ \t]+(.*?))?\s*\Z"
)
# tqdm's default bar: `{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate}{postfix}]`
# A count as tqdm prints it: `45`, or with `unit_scale` `45.0`, `1.20k`, `3.40M`, `120G`.
_COUNT = r"\d+(?:\.\d+)?[kMGTPEZY]?"
_BAR = re.compile(
    rf"(?:(?P<desc>[^\r\n|]*?):\s*)?\s*\d{{1,3}}%\|[^|]*\|\s*(?P<n>{_COUNT})/(?P<total>{_COUNT})\s*"
    r"\[(?P<inside>[^\[\]]*)\]\s*\Z"
)
# without a total: `{desc}: {n_fmt}{unit} [{elapsed}, {rate}{postfix}]`
_COUNTER = re.compile(
    rf"(?:(?P<desc>[^\r\n|]*?):\s*)?(?P<n>{_COUNT})[A-Za-z]*\s+"
    r"\[(?P<inside>\d[\d:]*,[^\[\]]*)\]\s*\Z"
)
_PREFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_LIGHTNING_EPOCH = re.compile(r"(?:\A|\s)Epoch (\d+)\Z")
_LIGHTNING_OTHERS = ("Validation", "Sanity Checking", "Testing", "Predicting")


@dataclass(frozen=True, slots=True)
class Report:
    """One progress report. `step` None: metrics only. `at`: epoch seconds, None: when read."""

    step: int | None
    total: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    source: str = "protocol"  # "sdk" | "protocol" | "tqdm" | "lightning" | "hf"
    at: float | None = None


def number(text: str) -> float | None:
    """A finite float from `text`, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _whole(text: str) -> int | None:
    if not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if value <= MAX_STEP else None


def _count(text: str) -> int | None:
    """A tqdm count, `unit_scale`'s SI prefix applied: `1.20k` -> 1200, `45.0` -> 45."""
    if text.isdigit():
        return _whole(text)
    prefix = text[-1] if text[-1].isalpha() else ""
    scale = _PREFIX.get(prefix)
    value = number(text[: len(text) - len(prefix)])
    if scale is None or value is None or value * scale > MAX_STEP:
        return None
    return round(value * scale)


def parse_protocol(line: str) -> Report | None:
    """`::gpuyard progress step=10 total=100 loss=0.31` (metrics-only lines allowed)."""
    match = _PROTOCOL.match(line)
    if match is None:
        return None
    step = total = None
    metrics: dict[str, float] = {}
    for pair in (match.group(1) or "").split():
        key, sep, value = pair.partition("=")
        if not sep or not _NAME.match(key):
            return None
        if key in ("step", "total"):
            whole = _whole(value)
            if whole is None:
                return None
            step, total = (whole, total) if key == "step" else (step, whole)
            continue
        parsed = number(value)
        if parsed is None:
            return None
        if len(metrics) < MAX_METRICS:
            metrics[key] = parsed
    if step is None and not metrics:
        return None
    return Report(step, total or None, metrics, "protocol")


def _postfix(inside: str) -> dict[str, float]:
    """tqdm's `[elapsed<remaining, rate, key=value, ...]`: the numeric `key=value` items."""
    metrics: dict[str, float] = {}
    for item in inside.split(",")[2:]:
        key, sep, value = item.strip().partition("=")
        if sep and _NAME.match(key) and len(metrics) < MAX_METRICS:
            parsed = number(value.strip())
            if parsed is not None:
                metrics[key] = parsed
    return metrics


def parse_bar(segment: str) -> Report | None:
    """A tqdm bar (Lightning's when its description is `Epoch N`), or None."""
    match = _BAR.search(segment) or _COUNTER.search(segment)
    if match is None:
        return None
    desc = (match.group("desc") or "").strip()
    if desc.startswith(_LIGHTNING_OTHERS):
        return None
    step = _count(match.group("n"))
    total = _count(match.group("total")) if "total" in match.groupdict() else None
    if step is None:
        return None
    metrics = _postfix(match.group("inside"))
    epoch = _LIGHTNING_EPOCH.search(desc)
    if epoch is not None:
        metrics.setdefault("epoch", float(epoch.group(1)))
        metrics.pop("v_num", None)  # Lightning's logger version, not a metric
        return Report(step, total or None, metrics, "lightning")
    return Report(step, total or None, metrics, "tqdm")


def parse_hf_dict(segment: str) -> Report | None:
    """Trainer's `{'loss': '0.31', 'learning_rate': '5e-05', 'epoch': '0.5'}` (transformers 5:
    floats printed as strings) or `{'loss': 0.31, ...}` (4): metrics only."""
    start = segment.find("{'")
    if start < 0 or not segment.endswith("}"):
        return None
    try:
        value = ast.literal_eval(segment[start:])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or "epoch" not in value:
        return None
    metrics: dict[str, float] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _NAME.match(key) or len(metrics) >= MAX_METRICS:
            continue
        if isinstance(item, str) and len(item) <= 32:
            parsed = number(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            parsed = float(item) if math.isfinite(item) else None
        else:
            parsed = None
        if parsed is not None:
            metrics[key] = parsed
    return Report(None, None, metrics, "hf") if metrics else None


def _metrics_of(pairs: list[tuple[str, str]], into: dict[str, float]) -> dict[str, float]:
    """Rich's `name: value` pairs that are numbers, added to `into` (bounded)."""
    for key, value in pairs:
        parsed = number(value)
        if parsed is not None and (key in into or len(into) < MAX_METRICS):
            into[key] = parsed
    return into


def parse_rich_row(text: str) -> Report | None:
    """A row of Lightning's `RichProgressBar` (ANSI codes already stripped), or None."""
    row = progress_rich.parse_row(text)
    if row is None:
        return None
    desc, n, total, pairs = row
    metrics = _metrics_of(pairs, {})
    metrics.pop("v_num", None)  # Lightning's logger version, not a metric
    epoch = progress_rich.epoch_of(desc)
    if epoch is not None:
        metrics.setdefault("epoch", float(epoch))
    if n > MAX_STEP or (total or 0) > MAX_STEP:
        return None
    return Report(n, total or None, metrics, "lightning")


def parse_segment(segment: str) -> Report | None:
    """One line (or one `\\r` update) of a job's output, in any format above, or None."""
    text = segment.strip()
    if not text or len(text) > MAX_LINE_CHARS:
        return None
    if "::gpuyard progress" in text:
        return parse_protocol(text)
    if text.endswith("]") and ("/s" in text or "s/" in text):  # a rate: `it/s`, `s/it`
        return parse_bar(text)
    if progress_rich.looks_like_row(text):
        return parse_rich_row(text)
    if text.endswith("}") and "'epoch'" in text:
        return parse_hf_dict(text)
    return None


def parse_sdk_line(line: bytes) -> Report | None:
    """One line the SDK wrote (`_progress.py`); the job wrote it, so nothing in it is trusted:
    wrong types, odd names and non-finite values are dropped."""
    if len(line) > MAX_LINE_CHARS * 4:
        return None
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    step, total, at = record.get("step"), record.get("total"), record.get("t")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        return None
    if not (isinstance(total, int) and not isinstance(total, bool) and 0 < total <= MAX_STEP):
        total = None
    raw = record.get("metrics")
    metrics: dict[str, float] = {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            if (
                isinstance(key, str)
                and _NAME.match(key)
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and len(metrics) < MAX_METRICS
            ):
                metrics[key] = float(value)
    when = float(at) if isinstance(at, (int, float)) and math.isfinite(at) else None
    return Report(step, total, metrics, "sdk", when)


class OutputScanner:
    """Reads a job's output as it grows: `feed(chunk)` returns the reports in it. Lines and
    `\\r` updates are cut at their terminator; the unterminated rest is kept (bounded) and
    read again with the next chunk; a bar there is read at once (a slow bar's last update has
    no terminator yet) and not reported twice. The metrics Rich wrapped onto the lines after a
    row are reported with that row's step, in the next chunk too if the read cut there."""

    MAX_CARRY = MAX_LINE_CHARS

    def __init__(self) -> None:
        self._carry = ""
        self._last_open = ""
        self._row: Report | None = None  # the Rich row whose wrapped lines may follow

    def reset(self) -> None:
        """Forget the unterminated rest (the reader skipped ahead)."""
        self._carry = self._last_open = ""
        self._row = None

    def feed(self, chunk: str) -> list[Report]:
        text = self._carry + chunk
        parts = re.split(r"[\r\n]", text)
        rest = parts.pop()
        reports: list[Report] = []
        pending: Report | None = None  # a Rich row (or its wrapped lines) still gathering
        for part in parts:
            if part and part == self._last_open:
                self._last_open = ""
                continue  # the open bar (or wrapped line) read last time, now terminated
            self._last_open = ""
            line = progress_rich.strip_ansi(part)
            if self._row is not None and progress_rich.is_continuation(line):
                pending = _wrapped_into(pending or _bare(self._row), line)
                continue
            if pending is not None:
                reports.append(_done(pending))
                pending = self._row = None
            report = parse_segment(line)
            if report is not None and report.source == "lightning" and report.step is not None:
                pending = self._row = report
            elif report is not None:
                reports.append(report)
        self._carry = rest if len(rest) <= self.MAX_CARRY else ""
        if rest and rest != self._last_open:
            report, wrapped = self._read_open(progress_rich.strip_ansi(rest), pending)
            if wrapped is not None:
                pending = wrapped
                self._last_open = rest
            elif report is not None:
                if pending is not None:
                    reports.append(_done(pending))
                    pending = self._row = None
                reports.append(report)
                self._last_open = rest
        if pending is not None:
            reports.append(_done(pending))
        return reports

    def _read_open(self, line: str, pending: Report | None) -> tuple[Report | None, Report | None]:
        """The unterminated rest: (a bar's report, or the pending row with this wrapped line)."""
        if self._row is not None and progress_rich.is_continuation(line):
            return None, _wrapped_into(pending or _bare(self._row), line)
        stripped = line.strip()
        if stripped.endswith("]"):
            return parse_bar(stripped), None
        if progress_rich.looks_like_row(stripped) and len(stripped) <= MAX_LINE_CHARS:
            return parse_rich_row(stripped), None
        return None, None


def _bare(row: Report) -> Report:
    """A Rich row's step and total, no metrics: what its wrapped lines read later attach to."""
    return Report(row.step, row.total, {}, row.source)


def _wrapped_into(report: Report, line: str) -> Report:
    if len(line) <= MAX_LINE_CHARS:
        _metrics_of(progress_rich.metric_pairs(line), report.metrics)
    return report


def _done(report: Report) -> Report:
    report.metrics.pop("v_num", None)  # Lightning's logger version, not a metric
    return report
