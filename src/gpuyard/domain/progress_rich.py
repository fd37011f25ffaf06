"""Lightning's Rich progress bar (`RichProgressBar`, Lightning's default wherever `rich` is
installed), read from a job's log.

What Rich writes where it is not a terminal (a batch job's log file): nothing while the bar
runs, and its last state once, when the bar stops (at the end of `fit`, or of each epoch with
`RichProgressBar(leave=True)`). Where Rich thinks it is a terminal (a pty: `gpuyard run`; or
`TTY_COMPATIBLE=1` / `FORCE_COLOR=1` in the job's environment, Rich's own switches), every
refresh: `\\r`, ANSI erase and cursor-up codes, the rows. Either way one row reads
`Epoch 3/9  ━━━━╸━━━━━ 45/100 0:00:12 • 0:00:15 3.61it/s v_num: 0 train_loss: 0.310`
(description, bar, batches `n/total` (`--` for an unknown total), elapsed • remaining, rate,
the metrics as `name: value`). Rich fits the row to the console's width (80 columns in a file
unless `COLUMNS` says otherwise) and wraps the metrics column onto the next lines, each
indented under it: those continuation lines are read with the row they follow.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-_78])")
_ROW = re.compile(
    r"(?P<desc>\S.*?)\s+\S+\s+(?P<n>\d+)/(?P<total>\d+|--)\s+"
    r"(?:\d+:\d\d:\d\d|-:--:--)\s+•\s+(?:\d+:\d\d:\d\d|-:--:--)\s+"
    r"\d+(?:\.\d+)?it/s(?:\s+(?P<metrics>.*?))?\s*\Z"
)
_METRIC = re.compile(r"(?:\A|\s)([A-Za-z_][A-Za-z0-9_./\-]{0,63}): (\S+)")
_EPOCH = re.compile(r"\AEpoch (\d+)(?:/-?\d+)?\Z")
CONTINUATION_INDENT = 8  # a wrapped metrics line starts under the metrics column, far right
OTHER_LOOPS = ("Validation", "Sanity Checking", "Testing", "Predicting")


def strip_ansi(text: str) -> str:
    """`text` without terminal control sequences (colours, erase, cursor moves, links)."""
    return ANSI.sub("", text) if "\x1b" in text else text


def looks_like_row(text: str) -> bool:
    """Cheap test before the regex: Rich's time column and rate are in every row."""
    return " • " in text and "it/s" in text


def parse_row(text: str) -> tuple[str, int, int | None, list[tuple[str, str]]] | None:
    """One row (ANSI codes already stripped): (description, n, total, raw metric pairs), or
    None. Lightning's other loops' rows (validation, sanity check, test, predict) are None:
    they are not the training's progress."""
    match = _ROW.search(text)
    if match is None:
        return None
    desc = match.group("desc").strip()
    if desc.startswith(OTHER_LOOPS):
        return None
    total = match.group("total")
    pairs = metric_pairs(match.group("metrics") or "")
    return desc, int(match.group("n")), None if total == "--" else int(total), pairs


def metric_pairs(text: str) -> list[tuple[str, str]]:
    """The `name: value` items of a metrics column (values not yet checked as numbers)."""
    return _METRIC.findall(text)


def is_continuation(text: str) -> bool:
    """A line of a wrapped metrics column: indented far, holding `name: value` items (or a
    name Rich cut with `…`)."""
    stripped = text.lstrip(" ")
    return (
        bool(stripped)
        and len(text) - len(stripped) >= CONTINUATION_INDENT
        and (": " in stripped or stripped.endswith("…"))
    )


def epoch_of(desc: str) -> int | None:
    """Lightning's training row is `Epoch N/M` (`Epoch N` without max_epochs)."""
    match = _EPOCH.match(desc)
    return int(match.group(1)) if match else None
