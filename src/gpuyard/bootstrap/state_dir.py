"""The state dir's safety: writable by the server alone, searchable by job owners where they
must reach it, never a planted file or link; the API token kept in it."""

from __future__ import annotations

import logging
import os
import pwd
import secrets
import stat
from pathlib import Path

from gpuyard.domain.errors import Unavailable
from gpuyard.settings import TOKEN_FILE as TOKEN


def writable_state_dir(state: Path) -> None:
    """Make the state dir and prove it takes a file, so that a read-only or full file system
    is one line naming the path and a fix (a bare "Read-only file system" named nothing);
    then close it (`close_state_dir`)."""
    probe = state / f".write-test-{os.getpid()}"
    _refuse_foreign_links(state)
    _refuse_a_file(state)
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        raise Unavailable(
            f"the state dir {state} cannot be written ({exc.strerror or exc}): choose a "
            "writable one with --state-dir or GPUYARD_STATE_DIR (`gpuyard doctor --state-dir "
            "DIR` checks one)"
        ) from None
    close_state_dir(state)
    if os.geteuid() == 0:
        _warn_unreachable(state)


def _refuse_a_file(state: Path) -> None:
    """The state dir, or a folder above it, that is a file: one line saying so (mkdir's own
    "File exists" or "Not a directory" named neither the path nor the fix)."""
    for path in (state, *state.parents):
        if path.exists():
            if not path.is_dir():
                where = "" if path == state else f" cannot be made: {path}"
                raise Unavailable(
                    f"the state dir {state}{where} is a file, not a folder; choose a folder "
                    "with --state-dir or GPUYARD_STATE_DIR"
                )
            return


def _refuse_foreign_links(state: Path) -> None:
    """The state dir's path through a link another user owns (a link in /tmp, made by anyone,
    pointed at any folder, which the server would take over and chmod): one line saying so."""
    path = state.absolute()
    for each in (path, *path.parents):
        try:
            info = os.lstat(each)
        except OSError:
            continue  # not made yet
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (0, os.geteuid()):
            try:
                owner = f"{pwd.getpwuid(info.st_uid).pw_name} (uid {info.st_uid})"
            except KeyError:
                owner = f"uid {info.st_uid}"
            where = "" if each == path else f" (through {each})"
            raise Unavailable(
                f"the state dir {state}{where} is a symbolic link of {owner}'s, who could point "
                "it at any folder: give a folder of your own with --state-dir or "
                "GPUYARD_STATE_DIR"
            )


def closed_to_owners(state: Path) -> str | None:
    """On a root server, why jobs run as their owners cannot reach their own folders under
    `state` (they must cross every folder above it to run the script copied at submit: a
    state dir under /root cannot be), or None."""
    if os.geteuid() != 0:
        return None
    for folder in (state.resolve(), *state.resolve().parents):
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            continue  # not made yet: its parents decide
        if not mode & 0o001:
            return (f"the server's state dir {state} is closed to them ({folder} is not "
                    "searchable by others)")  # fmt: skip
    return None


def _warn_unreachable(state: Path) -> None:
    """Say at start which folder shuts jobs run as their owners out (their submits are
    refused, `RunAsPolicy`)."""
    why = closed_to_owners(state)
    if why is not None:
        logging.getLogger("gpuyard.server").warning(
            "jobs run as their owners cannot reach their folders: %s; other users' submits "
            "are refused; use a state dir such as /var/lib/gpuyard (--state-dir)", why,
        )  # fmt: skip


def close_state_dir(state: Path) -> None:
    """The state dir holds every job's command and `--env` secrets, the database and the
    token: refused when another user owns it or may write in it (they could plant a token or
    a database), else made 0700 (0711 on a root server: each job, run as its owner, reaches
    its own folder by path; nobody lists it) and its files the server's alone (0600)."""
    refuse_foreign(state, "state dir")
    os.chmod(state, 0o711 if os.geteuid() == 0 else 0o700)
    for name in ("gpuyard.db", "gpuyard.db-wal", "gpuyard.db-shm", "gpuyard.db.lock", TOKEN):
        path = state / name
        if path.exists() and not path.is_symlink():
            refuse_foreign(path, "token file" if name == TOKEN else "database file")
            os.chmod(path, 0o600)


def refuse_foreign(path: Path, what: str) -> None:
    """One line with the fix when `path` is another user's or others may write to it."""
    info = os.stat(path)
    if info.st_uid != os.geteuid():
        raise Unavailable(
            f"the {what} {path} belongs to uid {info.st_uid}, not to the server's user "
            f"(uid {os.geteuid()}): use one of your own (--state-dir) or `chown -R "
            f"{os.geteuid()} {path}`"
        )
    if info.st_mode & 0o022:
        raise Unavailable(
            f"the {what} {path} may be written by other users (mode {info.st_mode & 0o777:o}): "
            f"`chmod go-w {path}` after checking what is in it"
        )


def current_umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def ensure_token(path: Path) -> str:
    """The API token, created on first start with mode 0600; one found there is used only if
    it is the server's own and nobody else may write it (a planted token admits its planter)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        if path.is_symlink():
            raise Unavailable(
                f"the token file {path} is a symbolic link: remove it (the server makes a new one)"
            ) from None
        refuse_foreign(path, "token file")
        os.chmod(path, 0o600)
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
