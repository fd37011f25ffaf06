"""An interactive job's terminal, a part of the supervisor (`supervisor.py`) loaded only for a
job whose launch file says `pty`: the common start never reads it.

Standard library only, like the supervisor, and found the way the supervisor is (beside it: its
.pyc beside the supervisor's .pyc in the jobs folder, its source beside the source; see
`supervisor._part`). What it writes to the job's log goes through the supervisor's own writer
(`log_write`, `tee_write`), so a full disk is handled in one place.
"""

import os
import sys
import time

TYPE_CHECKING = False  # `typing` is not imported at the start
if TYPE_CHECKING:
    import select
    import socket
    from collections.abc import Callable

# The attach socket's frames, both ways: TYPE (1 byte) LENGTH (4 bytes, big-endian) PAYLOAD.
#   d  data: keystrokes for the job, or the job's output for the client
#   w  window size (client -> supervisor): rows, cols (2 bytes each, big-endian)
#   q  detach: the client leaves (the session runs on); from the supervisor: another client
#      attached and took the session over
# The session's end closes the connection (after its last output): the client asks the server
# how the job ended.
_FRAME_HEADER = 5
_MAX_FRAME = 1 << 20
_OUT_HIGH = 256 << 10  # output for a client that does not read: the job waits (as over ssh)
_IN_HIGH = 64 << 10  # keystrokes the job does not read: the client waits


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


class Session:
    """An interactive job's pty and the Unix socket its terminal attaches through.

    The job is the session leader of a new session whose controlling terminal is the pty's
    slave; the supervisor holds the master and relays it to one attached client (another
    attach takes the session over) while copying everything the job writes to its log. The
    socket (`attach_path`, in the job's folder) is the job's user's, mode 0600: the kernel's
    permission check on connect is the access control (that user, or root), and the peer's
    uid is checked again on accept. The job execs only once the first client has sent its
    first frame (its window size): nothing it prints before anyone looks is lost, and it
    starts with the right size."""

    def __init__(
        self,
        plan: dict,  # type: ignore[type-arg]
        tee: int,
        log_write: "Callable[[bytes], None]",
        tee_write: "Callable[[int, bytes], None]",
    ) -> None:
        import fcntl
        import socket
        import termios

        self._ioctl, self._termios, self._socket = fcntl.ioctl, termios, socket
        self.master, self.slave = os.openpty()
        os.set_blocking(self.master, False)
        who = plan.get("run_as")
        self.uid = who["uid"] if who is not None else os.geteuid()
        if self.uid != os.geteuid():
            os.fchown(self.slave, self.uid, -1)  # the user's own terminal, as login makes it
            os.fchmod(self.slave, 0o620)
        self.go_r, self.go_w = os.pipe()
        self.program = plan["argv"][0]
        wait_s = float(plan.get("attach_timeout_s") or 0)
        self.attach_by = time.monotonic() + wait_s if wait_s > 0 else 0.0
        self.path = plan["attach_path"]
        self.listener = self._listen(who)
        self.tee = tee
        self._log_write, self._tee = log_write, tee_write  # the supervisor's
        self.client: socket.socket | None = None  # the attached client's
        self.into = bytearray()  # from the client, for the job
        self.out = bytearray()  # from the job, for the client
        self.frames = bytearray()  # what the client sent, not yet a whole frame
        self.master_open = True
        self.poller: select.poll | None = None
        self.masks: dict[int, int] = {}

    def _listen(self, who: dict | None) -> "socket.socket":  # type: ignore[type-arg]
        socket = self._socket
        try:
            os.unlink(self.path)  # an earlier run's
        except FileNotFoundError:
            pass
        # Through the folder's fd: a socket's path holds at most 107 bytes.
        folder = os.open(os.path.dirname(self.path), os.O_PATH | os.O_DIRECTORY)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o177)
        try:
            sock.bind(f"/proc/self/fd/{folder}/{os.path.basename(self.path)}")
        finally:
            os.umask(umask)
            os.close(folder)
        if who is not None and who["uid"] != os.geteuid():
            os.chown(self.path, who["uid"], who["gid"], follow_symlinks=False)
        sock.listen(4)
        sock.setblocking(False)
        return sock  # type: ignore[no-any-return]

    def own_fds(self) -> list[int]:
        """What the job must not hold (its pty's slave is dup'ed to 0-2 first)."""
        fds = [self.master, self.slave, self.go_w, self.listener.fileno()]
        return fds + ([self.tee] if self.tee >= 0 else [])

    def wait_ms(self) -> int | None:
        """How long the poll may wait: until the attach deadline while nobody has come."""
        if self.go_w < 0 or not self.attach_by:
            return None
        return max(0, int((self.attach_by - time.monotonic()) * 1000) + 1)

    def abandon(self) -> None:
        """No client came by the deadline: the job's program is never run (it exits 127 on
        the pipe's end) and the log says why, as the controller reads it (LaunchFailed)."""
        if self.go_w < 0 or time.monotonic() < self.attach_by:
            return
        line = f"gpuyard: cannot run {self.program!r}: nobody attached to the session in time\n"
        self._log_write(line.encode())
        os.close(self.go_w)
        self.go_w = -1

    def take_terminal(self) -> None:
        """In the child, after `setsid`: the slave becomes its controlling terminal and 0-2."""
        self._ioctl(self.slave, self._termios.TIOCSCTTY, 0)
        for fd in (0, 1, 2):
            os.dup2(self.slave, fd)

    def forked(self) -> None:
        os.close(self.slave)
        os.close(self.go_r)
        self.slave = self.go_r = -1

    def watch(self, poller: "select.poll") -> None:
        self.poller = poller
        self._update()

    def _update(self) -> None:
        """Poll for what can move now: input while its buffer has room, output likewise."""
        import select

        want = {self.listener.fileno(): select.POLLIN}
        if self.master_open:
            want[self.master] = (select.POLLIN if len(self.out) < _OUT_HIGH else 0) | (
                select.POLLOUT if self.into else 0
            )
        if self.client is not None:
            fd = self.client.fileno()
            want[fd] = (select.POLLIN if len(self.into) < _IN_HIGH else 0) | (
                select.POLLOUT if self.out else 0
            )
        poller = self.poller
        assert poller is not None
        for fd in set(self.masks) - set(want):
            poller.unregister(fd)
        for fd, mask in want.items():
            if self.masks.get(fd) != mask:
                poller.register(fd, mask)
        self.masks = want

    def handle(self, fd: int, event: int) -> None:
        import select

        if fd == self.listener.fileno():
            self._accept()
        elif fd == self.master:
            if event & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._read_job()
            if event & select.POLLOUT:
                self._write_job()
        elif self.client is not None and fd == self.client.fileno():
            if event & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._read_client()
            if self.client is not None and event & select.POLLOUT:
                self._send()
        self._update()

    def _accept(self) -> None:
        socket = self._socket
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        if int.from_bytes(cred[4:8], sys.byteorder) not in (0, self.uid, os.geteuid()):
            conn.close()  # the socket's mode already keeps others out: a second lock
            return
        if self.client is not None:
            self._drop(frame(b"q"))  # taken over: the earlier client is told, then let go
        conn.setblocking(False)
        self.client = conn
        self.frames.clear()

    def _drop(self, last: bytes = b"") -> None:
        """Let the client go; `last`: a frame it is sent first, after what it has not yet had
        (whole frames: it must read `last` as one), for at most half a second."""
        client, self.client = self.client, None
        pending, self.out = bytes(self.out) + last, bytearray()
        if client is None:
            return
        if last:
            try:
                client.settimeout(0.5)
                client.sendall(pending)
            except OSError:
                pass
        client.close()

    def _read_client(self) -> None:
        assert self.client is not None
        try:
            data = self.client.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop()  # gone without a word: as a detach (the session runs on)
            return
        self.frames += data
        while len(self.frames) >= _FRAME_HEADER and self.client is not None:
            size = int.from_bytes(self.frames[1:5], "big")
            if size > _MAX_FRAME:
                self._drop()
                return
            if len(self.frames) < _FRAME_HEADER + size:
                break
            kind = bytes(self.frames[0:1])
            payload = bytes(self.frames[_FRAME_HEADER : _FRAME_HEADER + size])
            del self.frames[: _FRAME_HEADER + size]
            self._frame(kind, payload)
        if self.into:
            self._write_job()

    def _frame(self, kind: bytes, payload: bytes) -> None:
        if kind == b"d":
            self.into += payload
        elif kind == b"w" and len(payload) == 4:
            rows, cols = payload[0:2], payload[2:4]
            order = sys.byteorder
            size = (int.from_bytes(rows, "big").to_bytes(2, order)
                    + int.from_bytes(cols, "big").to_bytes(2, order) + bytes(4))  # fmt: skip
            try:
                self._ioctl(self.master, self._termios.TIOCSWINSZ, size)  # SIGWINCH to the job
            except OSError:
                pass
        elif kind == b"q":
            self._drop()
            return
        if self.go_w >= 0:  # the first client's first frame: the job may start now
            os.write(self.go_w, b"g")
            os.close(self.go_w)
            self.go_w = -1

    def _write_job(self) -> None:
        try:
            done = os.write(self.master, self.into)
        except BlockingIOError:
            return
        except OSError:
            done = len(self.into)  # the terminal is gone: nobody reads keystrokes any more
        del self.into[:done]

    def _read_job(self) -> bool:
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return True
        except OSError:  # EIO: no process holds the terminal any more
            data = b""
        if not data:
            self.master_open = False
            return False
        self._log_write(data)
        if self.tee >= 0:
            self._tee(self.tee, data)
        if self.client is not None:
            self.out += frame(b"d", data)
            self._send()
        return True

    def notice(self, line: bytes) -> None:
        """One of the supervisor's own lines (a stop, the time limit), for the client too."""
        if self.client is not None:
            self.out += frame(b"d", b"\r\n" + line.replace(b"\n", b"\r\n"))

    def _send(self) -> None:
        assert self.client is not None
        try:
            done = self.client.send(self.out)
        except BlockingIOError:
            return
        except OSError:
            self._drop()
            return
        del self.out[:done]

    def finish(self) -> None:
        """The job is gone: what its terminal still holds, to the log and the client (for at
        most 2 s), then the end of the connection and of the socket."""
        import select

        while self.master_open and self._read_job():
            pass
        os.close(self.master)
        deadline = time.monotonic() + 2
        poller = select.poll()
        if self.client is not None:
            poller.register(self.client.fileno(), select.POLLOUT)
        while self.client is not None and self.out and time.monotonic() < deadline:
            if poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                self._send()
        if self.client is not None:
            self.client.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
