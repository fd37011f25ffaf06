"""A real dashboard to drive: a `gpuyard server` process with two real accounts, alice and bob,
each with an API token of their own, GPUs from the project's fake NVML (live telemetry through
the real pynvml code) when a C compiler is there, else declared ones; and the browser set-up
(Debian's chromium through playwright) shared by tests/web and bench/dashboard.py.

The accounts and their tokens are made in the state dir's database before the server starts,
through the same AccountService the server runs (the API lets a user make tokens only for
themselves, and a root server's users would need a Unix socket login first). On a root server
each account's jobs run as a real Unix user (tests/e2e/unix_users.py), as they must there."""

from __future__ import annotations

import getpass
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuyard.client import Client
from gpuyard.domain.principal import Principal
from tests.e2e.server import ServerProcess
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
# Root cannot run Chromium's sandbox (and CI runs as root); /dev/shm is small in containers.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
VIEWPORT = {"width": 1440, "height": 900}

GPUS = [("NVIDIA H100 80GB HBM3", 81559, f"GPU-{i:08d}-dash-board-0000-000000000000")
        for i in range(2)]  # fmt: skip
# What the fake NVML reports per GPU: one busy, one quieter (the board then shows a contrast).
TELEMETRY = {
    0: {"util_gpu": 87, "util_mem": 45, "mem_used_mib": 61234, "temp_c": 71, "power_mw": 512000},
    1: {"util_gpu": 12, "util_mem": 3, "mem_used_mib": 2048, "temp_c": 44, "power_mw": 98000},
}


@dataclass
class Account:
    name: str
    token: str
    unix_user: str | None

    def client(self, url: str) -> Client:
        return Client(url, token=self.token)


# The admin account a browser logs in as: the server's own token is root's on a root server,
# and root may not log in to the dashboard (an admin uses an admin account there).
ADMIN_ACCOUNT = "ops"


@dataclass
class Dashboard:
    """A started server and who may use it: `admin` (the server's own token; in a browser the
    admin account `ops`), alice, bob."""

    server: ServerProcess
    place: Path  # a folder every account's Unix user may traverse (jobs' workdir)
    users: dict[str, Account] = field(default_factory=dict)
    nvml_state: Path | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin_token(self) -> str:
        return (self.server.state_dir / "token").read_text().strip()

    @property
    def browser_admin_token(self) -> str:
        """An admin's token a browser may log in with (never root's)."""
        return self.users[ADMIN_ACCOUNT].token

    def client(self, who: str) -> Client:
        if who == "admin":
            return Client(self.url, token=self.admin_token)
        return self.users[who].client(self.url)

    def submit(self, who: str, script: str, **fields: Any) -> int:
        """A `sh -c script` job of `who`'s, in the shared folder; its id."""
        fields.setdefault("workdir", str(self.place))
        with self.client(who) as client:
            return int(client.submit(["sh", "-c", script], **fields)["id"])


# A training job's stdout in the protocol (`::gpuyard progress step=.. total=..` and metrics):
# `steps` steps, `every_s` apart, a loss that falls and an accuracy that rises.
def training_script(steps: int, every_s: float, total: int | None = None) -> str:
    total = total or steps
    return (
        f"i=0; while [ $i -lt {steps} ]; do i=$((i+1)); "
        "awk -v i=$i -v t=%d 'BEGIN { printf \"::gpuyard progress step=%%d total=%%d "
        "loss=%%.4f acc=%%.4f\\n\", i, t, 2.4*exp(-i/15)+0.15+0.03*sin(i), 0.95-0.8*exp(-i/20) }'; "
        "sleep %s; done; echo training done" % (total, every_s)
    )


def vary_telemetry(dash: Dashboard, stop: threading.Event, every_s: float = 0.5) -> None:
    """Until `stop`: the fake NVML's readings move (a busy GPU 0 that breathes, a quieter GPU
    1), so the charts and the board show live numbers, not a flat line."""
    if dash.nvml_state is None:
        return
    tick = 0
    while not stop.wait(every_s):
        tick += 1
        wave = math.sin(tick / 4.0)
        write_fake_nvml_state(dash.nvml_state, {
            0: {**TELEMETRY[0], "util_gpu": int(85 + 10 * wave),
                "mem_used_mib": int(61234 + 3000 * wave), "temp_c": int(70 + 3 * wave),
                "power_mw": int(510000 + 60000 * wave)},
            1: {**TELEMETRY[1], "util_gpu": int(30 + 25 * math.sin(tick / 3.0)),
                "temp_c": int(48 + 2 * wave)},
        })  # fmt: skip


def make_accounts(state_dir: Path, unix_users: Mapping[str, str | None]) -> dict[str, Account]:
    """Accounts `unix_users`' keys (each mapped to its Unix user, or none), a submit token
    each, and the admin account `ADMIN_ACCOUNT` with an admin token, written into
    `state_dir`'s database before its server starts."""
    from gpuyard.bootstrap import ensure_token, open_store
    from gpuyard.domain.accounts import DEFAULT_TEAM
    from gpuyard.services.access.accounts import AccountService
    from gpuyard.services.access.tokens import TokenAuth
    from gpuyard.settings import Settings

    settings = Settings(state_dir=state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(settings)
    try:
        owner = getpass.getuser()
        admin = Principal(owner, "admin", DEFAULT_TEAM)
        accounts = AccountService(store, TokenAuth(ensure_token(settings.token_path), admin),
                                  server_user=owner)  # fmt: skip
        accounts.start()
        made: dict[str, Account] = {}
        for name, unix_user in unix_users.items():
            accounts.add_user(admin, name, unix_user=unix_user)
            secret, _ = accounts.create_token(Principal(name, "user", DEFAULT_TEAM, "submit"))
            made[name] = Account(name, secret, unix_user)
        accounts.add_user(admin, ADMIN_ACCOUNT, role="admin")
        ops = Principal(ADMIN_ACCOUNT, "admin", DEFAULT_TEAM)
        secret, _ = accounts.create_token(ops, scope="admin")
        made[ADMIN_ACCOUNT] = Account(ADMIN_ACCOUNT, secret, None)
        return made
    finally:
        store.close()


@contextmanager
def shared_place(prefix: str = "gydash-") -> Iterator[Path]:
    """A folder every user may traverse (pytest's own tmp is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_dashboard(
    place: Path,
    unix_users: Mapping[str, str | None],
    *args: str,
    telemetry_s: float = 0.5,
    env: Mapping[str, str] | None = None,
) -> Dashboard:
    """A server on a free port with the accounts made and two GPUs (fake NVML with live
    telemetry when gcc is there, else two declared GPUs). Stop it with `stop_dashboard`."""
    state_dir = place / "state"
    users = make_accounts(state_dir, unix_users)
    nvml_state: Path | None = None
    gpu_args: list[str] = ["--gpus", str(len(GPUS))]
    base = dict(os.environ)
    if gcc_path() is not None:
        nvml_state = place / "nvml_state"
        write_fake_nvml_state(nvml_state, TELEMETRY)
        base = fake_nvml_env(build_fake_nvml(place / "nvml"), gpus=GPUS, state=nvml_state)
        gpu_args = []  # auto: what NVML reports
    server_env = {k: v for k, v in base.items() if not k.startswith("GPUYARD_")}
    server_env["GPUYARD_TELEMETRY_S"] = str(telemetry_s)
    server_env.update(env or {})
    server = ServerProcess(state_dir, *gpu_args, "--cpus", "8", "--kill-grace", "1", *args,
                           env=server_env)  # fmt: skip
    server.start()
    return Dashboard(server, place, users, nvml_state)


def stop_dashboard(dashboard: Dashboard) -> None:
    dashboard.server.stop()
    dashboard.server.kill_jobs()


def login(browser: Browser, url: str, token: str) -> Page:
    """A new browser context (its own cookies) logged in through the login page as a person
    would: the token typed in, Enter pressed; the page it lands on."""
    context = browser.new_context(viewport=VIEWPORT, base_url=url)  # type: ignore[arg-type]
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/ui/login")
    field = page.get_by_label("Token", exact=False).first
    field.fill(token)
    field.press("Enter")
    page.wait_for_url(lambda at: "/ui/login" not in at)
    return page
