"""`gpuyard node join ADDRESS`: add this machine to a gpuyard Ray cluster, as root, in one
command (Ray's own join, `node_joining.py`, with the checks that make its failures one line).

It stays in the foreground as long as the machine is in the cluster (a systemd unit can run
it: `--print-unit`); SIGTERM or Ctrl-C stops this machine's Ray node. Its jobs run on under
their own supervisors, and the machine's agent re-adopts them when it is back.
"""

import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Annotated

import typer

from gpuyard.cli import node_joining as nj
from gpuyard.cli.cmd_common import fail


def join(
    address: Annotated[str, typer.Argument(metavar="ADDRESS", help="the Ray head's HOST:PORT")],
    token_file: Annotated[
        str, typer.Option("--token-file", help="the cluster token (mode 0600, root's)")
    ] = nj.DEFAULT_TOKEN_FILE,
    agent_dir: Annotated[
        str, typer.Option("--agent-dir", help="this machine's job folders (made root's, 0711)")
    ] = nj.DEFAULT_AGENT_DIR,
    node_name: Annotated[
        str | None,
        typer.Option("--node-name", help="its name in `gpuyard nodes` (default: hostname)"),
    ] = None,
    node_ip: Annotated[
        str | None,
        typer.Option("--node-ip-address", help="its address (default: Ray's choice)"),
    ] = None,
    num_gpus: Annotated[
        int | None, typer.Option("--num-gpus", help="GPUs to declare (default: Ray detects)")
    ] = None,
    num_cpus: Annotated[
        int | None, typer.Option("--num-cpus", help="CPUs to declare (default: all)")
    ] = None,
    memory: Annotated[
        str | None, typer.Option("--memory", help="memory to declare, e.g. 256G (default: Ray's)")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", metavar="KEY=VALUE", help="raylet environment (development, tests)"),
    ] = None,
    ray_options: Annotated[
        list[str] | None,
        typer.Option(
            "--ray-option",
            metavar="OPTION",
            help="to `ray start` as is: --ray-option=--min-worker-port=20000",
        ),
    ] = None,
    print_unit: Annotated[
        bool, typer.Option("--print-unit", help="print a systemd unit running this join, and exit")
    ] = False,
) -> None:
    """Add this machine to the gpuyard Ray cluster whose head is at ADDRESS (run as root);
    stays in the foreground until stopped."""
    try:
        request = nj.JoinRequest(
            address=address, node_name=node_name or nj.short_hostname(), token_file=token_file,
            agent_dir=agent_dir, node_ip=node_ip, num_gpus=num_gpus, num_cpus=num_cpus,
            memory_mib=_memory_mib(memory), extra_env=nj.parse_env(env or []),
            ray_options=tuple(ray_options or ()),
        )  # fmt: skip
        nj.split_address(address)
        if print_unit:
            sys.stdout.write(nj.systemd_unit(request))
            return
        nj.check_root(os.geteuid())
        nj.check_token_file(token_file)
        ray = nj.ray_executable()
        nj.check_ray(ray)
        nj.check_reachable(address)
        nj.make_agent_dir(agent_dir)
    except nj.JoinRefused as exc:
        fail(str(exc))
    code = _run_forwarding_signals(nj.ray_argv(request, ray), nj.ray_env(request, os.environ))
    raise typer.Exit(code)


def _memory_mib(memory: str | None) -> int | None:
    if memory is None:
        return None
    from gpuyard.domain.errors import InvalidRequest
    from gpuyard.domain.units import parse_size_mib

    try:
        return parse_size_mib(memory, field="memory")
    except InvalidRequest as exc:
        raise nj.JoinRefused(f"--memory: {exc}") from None


def _run_forwarding_signals(argv: list[str], env: dict[str, str]) -> int:
    """Run `ray start --block`; SIGTERM, SIGINT or SIGHUP to this process become one SIGTERM to
    it (Ray stops its raylet on SIGTERM); its exit status is ours (128+N for a signal N)."""
    # Its own process group: a terminal's Ctrl-C reaches it once, as the SIGTERM below.
    # And SIGTERM if this process dies first (killed with SIGKILL): no Ray node left running
    # that a restarted unit would start a second time.
    child = subprocess.Popen(argv, env=env, process_group=0, preexec_fn=_term_with_parent)
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = child.wait()
    return 128 - code if code < 0 else code


def _term_with_parent() -> None:
    """In the child, before exec: SIGTERM when its parent dies (Linux PR_SET_PDEATHSIG)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `gpuyard node join` to the app."""
    node = typer.Typer(help="This machine in a gpuyard Ray cluster: join it.", no_args_is_help=True)
    node.command("join")(join)
    app.add_typer(node, name="node")
