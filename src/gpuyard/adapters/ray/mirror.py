"""The server's copy of what a job writes on other machines: its log and progress file.

Users read a job's log and progress where every job's are, in the server's jobs folder
(`logs -f`, the dashboard, the progress reader); a job on another machine writes them in its
own machine's job folder. The mirror copies them as they grow: each poll of a machine's agent
reads, in one call, what every file of that machine's jobs gained since the last read
(`read_files`), and appends it. A multi-node job's ranks each log to `node<r>.log`; their
lines go into the job's one log behind `[node<r>] `, whole lines only (a line still being
written waits for its end). What has been copied of each file is kept in `.mirror.json` beside
the copy, so a restarted server goes on from there, copying nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuyard.adapters.executor.job_folder import LOG_FILE, JobFolder
from gpuyard.domain.job import Job
from gpuyard.services.ports import LaunchPlan

log = logging.getLogger("gpuyard.mirror")

PROGRESS_FILE = "progress.jsonl"
OFFSETS_FILE = ".mirror.json"
_READ_LIMIT = 1 << 20  # the agent's cap on one read


@dataclass
class MirrorFile:
    """One file of one rank, copied into `dest` (behind `prefix` on each line, if any)."""

    machine: str
    source: str  # its name in the job's folder on its machine
    dest: Path
    prefix: bytes | None
    offset: int = 0

    @property
    def key(self) -> str:
        return f"{self.machine}|{self.source}"


class Mirror:
    """Copies running jobs' files from their machines into the server's job folders."""

    def __init__(self, folder: JobFolder) -> None:
        self._folder = folder
        self._files: dict[int, list[MirrorFile]] = {}
        self._lock = threading.RLock()

    def _plan_files(self, job: Job, names: list[str], local: list[bool]) -> list[MirrorFile]:
        folder = self._folder.job_dir(job.id)
        if len(names) == 1:
            if local[0]:
                return []  # written in place
            return [MirrorFile(names[0], LOG_FILE, folder / LOG_FILE, None),
                    MirrorFile(names[0], PROGRESS_FILE, folder / PROGRESS_FILE, None)]  # fmt: skip
        files = [
            MirrorFile(name, f"node{rank}.log", folder / LOG_FILE, f"[node{rank}] ".encode())
            for rank, name in enumerate(names)
        ]
        if not local[0]:
            files.append(MirrorFile(names[0], PROGRESS_FILE, folder / PROGRESS_FILE, None))
        return files

    def start(self, job: Job, names: list[str], local: list[bool], plan: LaunchPlan) -> None:
        """A job starting: its copies begin empty, owned by the job's user as its log is."""
        files = self._plan_files(job, names, local)
        if not files:
            return
        folder = self._folder.job_dir(job.id)
        folder.mkdir(parents=True, exist_ok=True)
        for path in {f.dest for f in files}:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with contextlib.suppress(OSError):
                if plan.run_as is not None:
                    os.fchown(fd, plan.run_as.uid, plan.run_as.gid)
            os.close(fd)
        (folder / OFFSETS_FILE).unlink(missing_ok=True)
        with self._lock:
            self._files[job.id] = files

    def resume(self, job: Job, names: list[str], local: list[bool]) -> None:
        """After a server restart: go on from what was copied before."""
        files = self._plan_files(job, names, local)
        if not files:
            return
        try:
            done = json.loads((self._folder.job_dir(job.id) / OFFSETS_FILE).read_text())
        except (OSError, ValueError):
            done = {}
        for f in files:
            value = done.get(f.key) if isinstance(done, dict) else None
            f.offset = value if isinstance(value, int) and value >= 0 else 0
        with self._lock:
            self._files[job.id] = files

    def pass_once(self, link: Any, job_id: int | None = None, final: bool = False) -> int:
        """Copy what the files on `link`'s machine gained (of one job, or of all); the bytes
        read. `final`: the job has ended, a last line without its newline is copied too."""
        with self._lock:
            wanted = [
                (jid, f) for jid, files in self._files.items() if job_id in (None, jid)
                for f in files if f.machine == link.name
            ]  # fmt: skip
            if not wanted:
                return 0
            try:
                answers = link.call("read_files", [(jid, f.source, f.offset) for jid, f in wanted])
            except Exception as exc:  # the agent is away: the next pass copies it
                log.debug("mirror of %s: %s", link.name, exc)
                return 0
            total = 0
            touched = set()
            for (jid, f), (_, _, _, data) in zip(wanted, answers, strict=True):
                if not data:
                    continue
                used = _whole_lines(data, final or f.prefix is None)
                if not used:
                    continue
                _append(f.dest, used, f.prefix)
                f.offset += len(used)
                total += len(data)
                touched.add(jid)
            for jid in touched:
                self._save(jid)
            return total

    def finish(self, job_id: int, links: dict[str, Any]) -> None:
        """A job has ended: copy the rest of every file, then stop following it."""
        with self._lock:
            files = self._files.get(job_id, [])
            machines = {f.machine for f in files}
        for name in machines:
            link = links.get(name)
            while link is not None and self.pass_once(link, job_id, final=True):
                pass
        self.forget(job_id)

    def forget(self, job_id: int) -> None:
        with self._lock:
            self._files.pop(job_id, None)

    def _save(self, job_id: int) -> None:
        files = self._files.get(job_id, [])
        path = self._folder.job_dir(job_id) / OFFSETS_FILE
        tmp = path.with_name(OFFSETS_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps({f.key: f.offset for f in files}))
            tmp.replace(path)
        except OSError as exc:
            log.warning("job %s: cannot keep its mirror's place (%s)", job_id, exc)

    def close(self) -> None:
        with self._lock:
            self._files.clear()


def _whole_lines(data: bytes, everything: bool) -> bytes:
    """The part of `data` to copy now: through its last newline, unless `everything` (or one
    line fills a whole read: it is copied in pieces)."""
    if everything or len(data) >= _READ_LIMIT:
        return data
    return data[: data.rfind(b"\n") + 1]


def _append(dest: Path, data: bytes, prefix: bytes | None) -> None:
    if prefix is not None:
        lines = data.split(b"\n")
        tail = lines.pop()
        data = b"".join(prefix + line + b"\n" for line in lines)
        if tail:
            data += prefix + tail + b"\n"
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
