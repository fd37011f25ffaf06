"""Where the server listens and keeps its state by default, and whether a host is this
machine: `os` only.

The CLI's start path needs these before anything else (the URL, the token file) and must not
pay for `dataclasses` + `pathlib` (~10 ms); `gpuyard.settings` takes them from here.
"""

import os

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
TOKEN_FILE = "token"
# Where a server run as root also listens, for local users: the kernel says who connects
# (SO_PEERCRED), so they need no token. Outside the state dir, which stays closed.
DEFAULT_SOCKET = "/run/gpuyard/gpuyard.sock"
SOCKET_OFF = ("off", "none", "0", "no", "false")


# Where a server run as root (and root's CLI, for the token) keeps its state unless told: a
# folder every job's owner can cross to their own job's folder (root's home is closed to them:
# their scripts would not run). GPUYARD_ROOT_STATE_DIR moves it (a package's layout, tests).
ROOT_STATE_DIR = "/var/lib/gpuyard"


def state_dir_path(euid: int | None = None, root_state_dir: str | None = None) -> str:
    """`GPUYARD_STATE_DIR`, else for root (`euid` 0; default this process's)
    `root_state_dir` (default `GPUYARD_ROOT_STATE_DIR`, else `ROOT_STATE_DIR`), else
    `~/.local/share/gpuyard` (XDG data home)."""
    explicit = os.environ.get("GPUYARD_STATE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    if (os.geteuid() if euid is None else euid) == 0:
        return root_state_dir or os.environ.get("GPUYARD_ROOT_STATE_DIR") or ROOT_STATE_DIR
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data_home, "gpuyard")


def socket_path() -> str | None:
    """`GPUYARD_SOCKET` (`off`: none), else the root server's default socket."""
    explicit = os.environ.get("GPUYARD_SOCKET")
    if explicit:
        return None if explicit.strip().lower() in SOCKET_OFF else os.path.expanduser(explicit)
    return DEFAULT_SOCKET


def config_dir_path() -> str:
    """`$XDG_CONFIG_HOME/gpuyard`, else `~/.config/gpuyard`: where `gpuyard login` keeps the
    token (`token`, 0600) and the server it is for (`url`)."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(
        os.path.expanduser("~"), ".config"
    )
    return os.path.join(config_home, "gpuyard")


def login_url() -> str | None:
    """The server `gpuyard login` was last run for, if any."""
    try:
        with open(os.path.join(config_dir_path(), "url")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in ("localhost", "127.0.0.1", "::1", "[::1]"):
        return True  # the usual spellings, without `ipaddress` (~2 ms on the CLI's path)
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
