"""The terminal end of an interactive session: this terminal relayed to a job's pty.

The job's supervisor listens on a Unix socket in the job's folder (`attach.sock`, the job's
user's, mode 0600: only that user, or root, can connect). Frames both ways are
TYPE (1 byte) LENGTH (4 bytes, big-endian) PAYLOAD (`supervisor.py` holds the other end):
`d` data, `w` window size (rows, cols: 2 bytes each), `q` detach (from the supervisor: another
attach took the session over). The session's end closes the connection.

Here: the terminal in raw mode (Ctrl-C, Ctrl-Z, Ctrl-D are bytes for the job's own terminal),
the window size at the start and at every SIGWINCH, and the terminal restored whatever ends the
relay. Enter then `~.` detaches (the session runs on; `gpuyard attach JOB` comes back), as ssh.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

ATTACH_SOCKET = "attach.sock"
ENDED, DETACHED, TAKEN_OVER = "ended", "detached", "taken over"
_ESCAPE = b"~"
_NEWLINES = (b"\r", b"\n")


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def socket_path(log_path: str) -> str:
    """Where a job's attach socket is: beside its log, in its folder."""
    return os.path.join(os.path.dirname(log_path), ATTACH_SOCKET)


def connect(path: str) -> socket.socket:
    """Connected to the socket at `path` (through its folder's fd: a socket's path holds at
    most 107 bytes, a state dir's may be longer)."""
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(folder)
    return sock


def window_size(fd: int) -> bytes:
    """The `w` frame's payload for the terminal on `fd` (24x80 when it is not one)."""
    try:
        size = os.get_terminal_size(fd)
        rows, cols = size.lines, size.columns
    except OSError:
        rows, cols = int(os.environ.get("LINES", 24)), int(os.environ.get("COLUMNS", 80))
    return min(rows, 65535).to_bytes(2, "big") + min(cols, 65535).to_bytes(2, "big")


class _Escape:
    """ssh's escape: `~.` at the start of a line detaches; `~~` sends one `~`."""

    def __init__(self) -> None:
        self.line_start = True
        self.held = False

    def scan(self, data: bytes) -> tuple[bytes, bool]:
        """What to send of `data`, and whether the user asked to detach."""
        out = bytearray()
        for byte in (data[i : i + 1] for i in range(len(data))):
            if self.held:
                self.held = False
                if byte == b".":
                    return bytes(out), True
                out += byte if byte == _ESCAPE else _ESCAPE + byte
            elif self.line_start and byte == _ESCAPE:
                self.held = True
                continue
            else:
                out += byte
            self.line_start = byte in _NEWLINES
        return bytes(out), False


def relay(sock: socket.socket, stdin: int = 0, stdout: int = 1, *, redraw: bool = False) -> str:
    """This terminal <-> the session until it ends (ENDED), the user detaches (DETACHED) or
    another attach takes it over (TAKEN_OVER). Raw mode while it lasts, restored after.
    `redraw` (an attach to a session already running): the session's program is made to draw
    its screen again (`Redraw`), not left blank until a key."""
    import select
    import time

    saved = _raw(stdin)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    old_wakeup = signal.set_wakeup_fd(wake_w)
    old_winch = signal.signal(signal.SIGWINCH, _nothing)
    hangup = _Hangup()
    try:
        size = window_size(stdin)
        nudge = Redraw(size, time.monotonic()) if redraw else None
        sock.sendall(frame(b"w", nudge.first if nudge is not None else size))
        escape, reader, reading = _Escape(), _FrameReader(), True
        while True:
            wanted: list[Any] = [sock, wake_r, *([stdin] if reading else [])]
            wait_s = None if nudge is None else max(0.0, nudge.by - time.monotonic())
            ready = select.select(wanted, [], [], wait_s)[0]
            if nudge is not None and (sock in ready or time.monotonic() >= nudge.by):
                sock.sendall(frame(b"w", window_size(stdin)))  # the program drew: the real size
                nudge = None
            if wake_r in ready and os.read(wake_r, 64):
                sock.sendall(frame(b"w", window_size(stdin)))  # SIGWINCH (or another signal)
            if hangup.seen:
                return DETACHED
            if stdin in ready:
                data = os.read(stdin, 4096)
                if not data:  # not a terminal, at its end: the pty's end-of-file, once
                    sock.sendall(frame(b"d", b"\x04"))
                    reading = False
                    continue
                data, leave = escape.scan(data) if saved is not None else (data, False)
                if data:
                    sock.sendall(frame(b"d", data))
                if leave:
                    sock.sendall(frame(b"q"))
                    return DETACHED
            if sock in ready:
                outcome = reader.feed(sock.recv(65536), lambda d: _write_all(stdout, d))
                if outcome is not None:
                    return outcome
    except (BrokenPipeError, ConnectionResetError):
        return ENDED
    finally:
        hangup.restore()
        signal.signal(signal.SIGWINCH, old_winch)
        signal.set_wakeup_fd(old_wakeup)
        os.close(wake_r)
        os.close(wake_w)
        _restore(stdin, saved)


class Redraw:
    """How an attach makes the session's program draw its screen again: a window size is
    changed only when it differs (the kernel sends SIGWINCH only then, and a shell at its
    prompt or a full-screen program redraws on it), so the session is first told a size one
    column off, then, once it has drawn (its first output) or after `wait_s`, the real one:
    two redraws, the last at the right size. tmux and dtach's `-r winch` do the same."""

    wait_s = 0.3

    def __init__(self, size: bytes, now: float) -> None:
        cols = int.from_bytes(size[2:4], "big")
        off = cols - 1 if cols > 1 else cols + 1
        self.first = size[:2] + off.to_bytes(2, "big")
        self.by = now + self.wait_s


class _FrameReader:
    """The supervisor's frames, as they arrive in pieces."""

    def __init__(self) -> None:
        self.pending = bytearray()

    def feed(self, data: bytes, write: Callable[[bytes], None]) -> str | None:
        if not data:
            return ENDED
        self.pending += data
        while len(self.pending) >= 5:
            size = int.from_bytes(self.pending[1:5], "big")
            if len(self.pending) < 5 + size:
                break
            kind, payload = bytes(self.pending[:1]), bytes(self.pending[5 : 5 + size])
            del self.pending[: 5 + size]
            if kind == b"q":
                return TAKEN_OVER
            if kind == b"d":
                write(payload)
        return None


class _Hangup:
    """SIGHUP and SIGTERM (the terminal closed, the client killed) end the relay cleanly: the
    terminal is restored and the session runs on, detached."""

    def __init__(self) -> None:
        self.seen = False
        self.old = {sig: signal.signal(sig, self._on) for sig in (signal.SIGHUP, signal.SIGTERM)}

    def _on(self, signum: int, frame: object) -> None:
        self.seen = True

    def restore(self) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)


def _nothing(signum: int, frame: object) -> None:
    """SIGWINCH's handler: its byte on the wakeup fd is what the relay acts on."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _raw(fd: int) -> list[Any] | None:
    """The terminal on `fd` in raw mode; its settings before (None: not a terminal)."""
    if not os.isatty(fd):
        return None
    import termios
    import tty

    saved: list[Any] = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)
    return saved


def _restore(fd: int, saved: list[Any] | None) -> None:
    if saved is None:
        return
    import termios

    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    except termios.error:
        pass


def say(message: str) -> None:
    """One line on stderr, at the start of a line whatever the session left on screen."""
    sys.stderr.write(f"\r\ngpuyard: {message}\n" if os.isatty(2) else f"gpuyard: {message}\n")
    sys.stderr.flush()
