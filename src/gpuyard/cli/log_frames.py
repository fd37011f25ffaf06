"""`gpuyard logs --rendered`: a log as a terminal shows it, for a file or a pipe.

A progress bar (tqdm, pip, curl) redraws its line with `\\r`: a terminal shows the line's last
frame over what is left of the earlier ones, a file keeps every frame. Piped, `gpuyard logs`
writes the raw bytes (what the job wrote, for tools that want them); with `--rendered` each
line's frames are folded into what a terminal would show (the dashboard's log panel does the
same, `terminalText` in web/static/js/dom.js). Standard library only: the CLI's start path.
"""

from __future__ import annotations


def rendered(text: bytes) -> bytes:
    """Each line of `text` as a terminal shows it: every `\\r` returns to the line's start and
    what follows overwrites it; `\\r\\n` is a plain line end."""
    if b"\r" not in text:
        return text
    return b"\n".join(_line(line) for line in text.split(b"\n"))


def _line(line: bytes) -> bytes:
    if b"\r" not in line:
        return line
    frames = line.split(b"\r")
    if len(frames) > 1 and frames[-1] == b"":
        frames.pop()
    shown = b""
    for frame in frames:
        shown = frame + shown[len(frame) :]
    return shown


class RenderedStream:
    """`rendered` over a stream of chunks: whole lines as they end (a line being redrawn waits
    for its end), then what is left at `end`."""

    def __init__(self) -> None:
        self._open = b""  # the line not ended yet

    def feed(self, chunk: bytes) -> bytes:
        done, newline, self._open = (self._open + chunk).rpartition(b"\n")
        return rendered(done + newline) if newline else b""

    def end(self) -> bytes:
        left, self._open = self._open, b""
        return rendered(left)
