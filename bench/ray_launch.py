"""Ray launch benchmark: submit-to-all-ranks-running latency of a 2-node job.

Two modes, each against plain Ray calls measured in the same run, rounds interleaved so that
load from elsewhere hits both sides alike.

``--mode server`` (the default; the target of issue 5): the whole path a user's job takes.

- ``gpuyard``: one `gpuyard server --backend ray` started for the run (`GPUYARD_RAY_LOCAL_NODES
  =2x2`: a loopback-only local cluster of 2 nodes of 2 logical GPUs and 2 CPUs, token auth,
  `GPUYARD_RAY_NODE_TIMEOUT_S=1.5`, like tests/raycluster/test_ray_server.py). Per round, from
  this process with `gpuyard.client.Client` (no CLI start-up counted): t0 = `time.time()` just
  before the HTTP submit of a `--nodes 2 --gpus 4` job (2 GPUs per node) whose command writes
  `date +%s.%N` to `DIR/$GPUYARD_NODE_RANK` and then sleeps; the round's figure is the later of
  the two nodes' timestamps minus t0. Then the job is cancelled and the round waits until it
  has ended and the API lists its GPUs free.
- ``ray``: Ray's own floor for the same thing, in a separate process (Ray allows one driver
  connection per process, and the server's cluster is loopback-only and owned by the server)
  that starts its own cluster of the same shape (`RayConnection.start_local`, 2 nodes of 2 GPUs
  and 2 CPUs, same node timeout) and, when told through a pipe, does with plain Ray calls:
  t0 = `time.time()`; a STRICT_SPREAD placement group of 2 bundles `{"GPU": 2, "CPU": 1}`
  (what the server asks for this job), pinned to the two nodes as gpuyard pins them
  (`bundle_label_selector` on `ray.io/node-id`); `ray.get(pg.ready())`; one actor per bundle
  that `Popen`s the same command with `GPUYARD_NODE_RANK` set; same timestamp files, same
  figure. Then (untimed) the processes, actors and group go and the round waits until Ray
  lists the 4 GPUs free.

Both clusters exist during the whole run (each idle while the other side's round runs). One
untimed warm-up round each, then N rounds alternating gpuyard, ray, gpuyard, ... with a pause
(`--settle`) before each. Breakdown: for gpuyard, the job's `submitted_at` and `started_at`
from the API (the server's clock: when it took the request, when its scheduling pass recorded
the job RUNNING, before the launch), and when the adapter's "[gpuyard] job N: 2 node(s)" log
line appeared (its `launch()` returned; seen by polling, ±5 ms); for ray, when the group was
ready and when both actors had started the command. At the end the server and the baseline
process are stopped and the script checks (psutil) that no process with either cluster's token
path in its environment or in their process trees, and no job process, is left, and kills
and reports any (`left_after_stop_killed`). With Ray 2.60 there always are some: the second
local node's ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent`` outlive
`RayConnection.close()` once an actor has run on that node (its raylet is SIGKILLed:
`allow_graceful=False`), in the server (stopped with SIGTERM) and in the baseline process
alike. They are found by process tree: their /proc environ is overwritten by Ray's process
titles, so psutil's `environ()` comes back empty for them. (The server exits 1 on SIGTERM:
after its graceful shutdown uvicorn re-raises the signal to the handler it found, Ray's.)

(The `--mode adapter` of earlier runs timed the gang path the server no longer uses: every
machine now runs its part through its agent, issue 21.)

    .venv/bin/python bench/ray_launch.py              # server mode, human-readable
    .venv/bin/python bench/ray_launch.py --json       # one JSON line
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from machine import with_machine

COMMAND = [sys.executable, "-c", "import time; print('running', flush=True); time.sleep(600)"]
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
            "OUT_OF_MEMORY"}  # fmt: skip
NODES = 2
GPUS_PER_NODE = 2
TARGET_RATIO = 1.2


class PlainRunner:
    """The baseline's actor: start the command (adapter mode: and return its first line)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str]) -> str:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def spawn(self, argv: list[str], rank: int) -> int:
        """Start the command as node `rank` and return at once (server mode)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["GPUYARD_NODE_RANK"] = str(rank)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "median_ms": round(statistics.median(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def machine() -> dict[str, Any]:
    """The bench's machine record (`bench/machine.py`, taken at its start) and Ray's version."""
    import ray  # only for its version; nothing is started

    return {**with_machine({}, backend="ray")["machine"], "ray": ray.__version__}


def wait_free(gpus: float, timeout_s: float = 30) -> None:
    """Ray frees a removed group's resources asynchronously: start each round from idle."""
    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
        time.sleep(0.01)


# ---- server mode -------------------------------------------------------------------------------


def node_command(folder: Path) -> list[str]:
    """Each node writes its start time (wall clock, ns) to `folder/<node rank>`, then waits."""
    return ["sh", "-c", f'date +%s.%N > "{folder}/$GPUYARD_NODE_RANK"; exec sleep 120']


def read_stamps(folder: Path, count: int) -> list[float] | None:
    """The nodes' timestamps once all `count` are written completely, else None."""
    stamps = []
    for rank in range(count):
        try:
            text = (folder / str(rank)).read_text()
        except FileNotFoundError:
            return None
        if not text.endswith("\n"):
            return None  # created by the shell's redirection, `date` not done yet
        stamps.append(float(text))
    return stamps


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GPUYARD_"))}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _iso(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class Baseline:
    """The plain-Ray side: a child process (`--baseline-worker`) with its own local cluster,
    driven one line at a time over its stdin/stdout."""

    def __init__(self, state: Path, node_timeout_s: float, log: Path) -> None:
        self.state = state
        argv = [sys.executable, __file__, "--baseline-worker", str(state),
                "--node-timeout", repr(node_timeout_s)]  # fmt: skip
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=_clean_env(), text=True, bufsize=1,
            )  # fmt: skip
        self.ready = self._answer()

    def ask(self, *words: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the worker answers every request or exits
        if not line:
            raise RuntimeError(f"the baseline process exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"baseline: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.ask("quit")
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def baseline_worker(state: str, node_timeout_s: float) -> None:
    """The baseline process: start a cluster, then serve `run DIR` / `stop` / `quit`."""
    # Protocol on a private copy of stdout; anything Ray prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    try:
        import ray

        from gpuyard.adapters.ray import LocalNodeSpec, RayConnection

        started = time.perf_counter()
        node = LocalNodeSpec(gpus=GPUS_PER_NODE, cpus=2)
        conn = RayConnection.start_local(state, nodes=[node] * NODES, node_timeout_s=node_timeout_s)
    except Exception as exc:
        out.write(json.dumps({"error": repr(exc)}) + "\n")
        raise
    try:
        node_ids = [n.node_id for n in conn.nodes() if n.alive]
        runner = ray.remote(PlainRunner)
        out.write(json.dumps({"cluster_start_s": time.perf_counter() - started}) + "\n")
        pg: Any = None
        actors: list[Any] = []
        for line in sys.stdin:
            word, *rest = line.split()
            try:
                if word == "run":
                    argv = node_command(Path(rest[0]))
                    t0 = time.time()
                    pg = ray.util.placement_group(
                        [{"GPU": float(GPUS_PER_NODE), "CPU": 1.0}] * NODES,
                        strategy="STRICT_SPREAD",
                        bundle_label_selector=[{"ray.io/node-id": n} for n in node_ids],
                    )
                    ray.get(pg.ready(), timeout=60)
                    t_pg = time.time()
                    bundle = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy
                    actors = [
                        runner.options(
                            num_gpus=GPUS_PER_NODE,
                            num_cpus=1,
                            scheduling_strategy=bundle(pg, placement_group_bundle_index=i),
                        ).remote()
                        for i in range(NODES)
                    ]
                    ray.get([a.spawn.remote(argv, i) for i, a in enumerate(actors)])
                    t_spawned = time.time()
                    out.write(json.dumps({"t0": t0, "pg_ready": t_pg, "spawned": t_spawned}) + "\n")
                elif word == "stop":
                    ray.get([a.stop.remote() for a in actors])
                    for actor in actors:
                        ray.kill(actor)
                    ray.util.remove_placement_group(pg)
                    actors, pg = [], None
                    wait_free(NODES * GPUS_PER_NODE)
                    out.write(json.dumps({"free": True}) + "\n")
                elif word == "quit":
                    break
                else:
                    out.write(json.dumps({"error": f"unknown request {line!r}"}) + "\n")
            except Exception as exc:
                out.write(json.dumps({"error": repr(exc)}) + "\n")
    finally:
        conn.close()
        out.write(json.dumps({"closed": True}) + "\n")


class Server:
    """`gpuyard server --backend ray` with a local 2x2 cluster, on a free loopback port."""

    def __init__(self, root: Path, node_timeout_s: float, tick_s: float | None) -> None:
        self.state = root / "server-state"
        self.state.mkdir(parents=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        env = _clean_env()
        env.update(
            GPUYARD_BACKEND="ray",
            GPUYARD_RAY_LOCAL_NODES=f"{NODES}x{GPUS_PER_NODE}",
            GPUYARD_RAY_NODE_TIMEOUT_S=repr(node_timeout_s),
        )
        if tick_s is not None:
            env["GPUYARD_TICK_S"] = repr(tick_s)
        gpuyard = Path(sys.executable).parent / "gpuyard"
        argv = [str(gpuyard) if gpuyard.exists() else shutil.which("gpuyard") or "gpuyard",
                "server", "--port", str(self.port), "--state-dir", str(self.state),
                "--kill-grace", "1"]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip

    def wait_healthy(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuyard server exited:\n{self.tail()}")
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"server not healthy in {timeout_s:g}s") from None
                time.sleep(0.1)

    def client(self) -> Any:
        from gpuyard.client import Client

        return Client(self.url, token=(self.state / "token").read_text().strip())

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def wait_stamps(folder: Path, timeout_s: float = 60, on_poll: Any = None) -> list[float]:
    deadline = time.monotonic() + timeout_s
    while True:
        if on_poll is not None:
            on_poll()
        stamps = read_stamps(folder, NODES)
        if stamps is not None:
            return stamps
        if time.monotonic() > deadline:
            raise TimeoutError(f"the nodes' timestamps did not appear in {timeout_s:g}s")
        time.sleep(0.005)


def gpuyard_server_round(client: Any, folder: Path) -> dict[str, float]:
    folder.mkdir()
    argv = node_command(folder)
    t0 = time.time()
    job = client.submit(argv, gpus=NODES * GPUS_PER_NODE, nodes=NODES, name="ray-launch-bench")
    t_answer = time.time()
    log = Path(job["log_path"])
    marker = f"[gpuyard] job {job['id']}: {NODES} node(s)".encode()
    seen: dict[str, float] = {}

    def look_at_log() -> None:
        if "launched" not in seen:
            with contextlib.suppress(FileNotFoundError):
                if marker in log.read_bytes():
                    seen["launched"] = time.time()

    stamps = wait_stamps(folder, on_poll=look_at_log)
    job = client.job(job["id"])
    if "launched" not in seen:  # the note comes after the starts: give it a moment
        deadline = time.monotonic() + 5
        while "launched" not in seen and time.monotonic() < deadline:
            time.sleep(0.005)
            look_at_log()
    assert job["state"] == "RUNNING", job
    assert job["node"].count(",") == NODES - 1, job
    client.cancel(job["id"])
    while client.job(job["id"])["state"] not in TERMINAL:
        time.sleep(0.02)
    while any(g["job"] is not None for g in client.gpus()):
        time.sleep(0.02)
    return {
        "total": max(stamps) - t0,
        "first_node": min(stamps) - t0,
        "http_answer": t_answer - t0,
        "accepted": _iso(job["submitted_at"]) - t0,
        "scheduled": _iso(job["started_at"]) - t0,
        "launch_returned": seen.get("launched", float("nan")) - t0,
    }


def ray_baseline_round(baseline: Baseline, folder: Path) -> dict[str, float]:
    folder.mkdir()
    times = baseline.ask("run", str(folder))
    stamps = wait_stamps(folder)
    baseline.ask("stop")
    t0 = times["t0"]
    return {
        "total": max(stamps) - t0,
        "first_node": min(stamps) - t0,
        "pg_ready": times["pg_ready"] - t0,
        "actors_started": times["spawned"] - t0,
    }


def process_tree(pid: int) -> dict[int, float]:
    """pid -> create time of a process and its descendants now (to recognise them later)."""
    import psutil

    tree = {}
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                tree[proc.pid] = proc.create_time()
    except psutil.Error:
        pass
    return tree


def leftovers(owners: dict[str, tuple[str, dict[int, float]]], marker: str) -> dict[str, list[Any]]:
    """Live processes, by owner: those of each cluster (its token path in their environment,
    or in the owner's process tree as snapshot before it was stopped), and the jobs' (`marker`,
    the run's folder, in their argv). The environment is read raw from /proc: Ray's
    `setproctitle` (``ray::DashboardAgent``...) leaves psutil's `environ()` empty."""
    import psutil

    found: dict[str, list[Any]] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            created = proc.create_time()
            try:
                with open(f"/proc/{proc.pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                environ = b""
            owner = None
            for name, (token_path, tree) in owners.items():
                if tree.get(proc.pid) == created or (
                    f"RAY_AUTH_TOKEN_PATH={token_path}".encode() in environ
                ):
                    owner = name
            if owner is None and any(marker in arg for arg in proc.info["cmdline"] or ()):
                owner = "jobs"
            if owner is not None:
                found.setdefault(owner, []).append(proc)
        except psutil.Error:
            continue
    return found


def clean_up(
    owners: dict[str, tuple[str, dict[int, float]]], marker: str, timeout_s: float = 10
) -> dict[str, list[str]]:
    """Wait for the clusters' and jobs' processes to end; SIGKILL any left (Ray's agents ignore
    SIGTERM). Returns what was killed, by owner (process names)."""
    deadline = time.monotonic() + timeout_s
    while (left := leftovers(owners, marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    killed: dict[str, list[str]] = {}
    for owner, procs in left.items():
        for proc in procs:
            with contextlib.suppress(Exception):
                name = " ".join(proc.cmdline()).strip()[:40] or proc.name()
                proc.kill()
                killed.setdefault(owner, []).append(name)
    return killed


def run_server(args: argparse.Namespace) -> dict[str, Any]:
    say = _say(args)
    info = machine()
    root = Path(tempfile.mkdtemp(prefix="gpuyard-bench-ray-"))
    rounds_dir = root / "rounds"
    rounds_dir.mkdir()
    trees: dict[str, dict[int, float]] = {"server": {}, "baseline": {}}
    server: Server | None = None
    baseline: Baseline | None = None
    server_rc: int | None = None
    failed = True
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    try:
        started = time.perf_counter()
        server = Server(root, args.node_timeout, args.tick)
        server.wait_healthy()
        server_s = time.perf_counter() - started
        say(f"gpuyard server (Ray backend, {NODES}x{GPUS_PER_NODE}) healthy in {server_s:.1f}s")
        client = server.client()
        gpus = client.gpus()
        assert len(gpus) == NODES * GPUS_PER_NODE, gpus
        (root / "baseline-state").mkdir()
        baseline = Baseline(root / "baseline-state", args.node_timeout, root / "baseline.log")
        say(f"baseline cluster up in {baseline.ready['cluster_start_s']:.1f}s")
        gpuyard_server_round(client, rounds_dir / "warm-g")  # imports, first workers
        ray_baseline_round(baseline, rounds_dir / "warm-r")
        for i in range(args.rounds):
            time.sleep(args.settle)
            ours.append(gpuyard_server_round(client, rounds_dir / f"g{i}"))
            time.sleep(args.settle)
            theirs.append(ray_baseline_round(baseline, rounds_dir / f"r{i}"))
            g, r = ours[-1], theirs[-1]
            say(f"round {i + 1}: gpuyard {g['total']:.3f} s (scheduled {g['scheduled']:.3f}, "
                f"launch() returned {g['launch_returned']:.3f}), ray {r['total']:.3f} s "
                f"(group ready {r['pg_ready']:.3f}, up {r['actors_started']:.3f})")  # fmt: skip
        failed = False
    finally:
        load_end = round(os.getloadavg()[0], 2)
        if server is not None:
            trees["server"] = process_tree(server.proc.pid)
            server.stop()
            server_rc = server.proc.returncode
        if baseline is not None:
            trees["baseline"] = process_tree(baseline.proc.pid)
            baseline.close()
        owners = {
            name: (str(root / f"{name}-state" / "ray_auth_token"), tree)
            for name, tree in trees.items()
        }
        left = clean_up(owners, str(rounds_dir))
        if left:
            say(f"killed, left behind after the stops: {left}")
        if failed and server is not None:
            print(f"server log (tail):\n{server.tail()}", file=sys.stderr)
        if args.keep or failed:
            print(f"kept {root} (server.log, baseline.log)", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    g_total = [r["total"] for r in ours]
    r_total = [r["total"] for r in theirs]
    ratio = statistics.median(g_total) / statistics.median(r_total)
    paired = [g / r for g, r in zip(g_total, r_total, strict=True)]

    def parts(rows: list[dict[str, float]], keys: list[str]) -> dict[str, dict[str, float]]:
        return {key: summary([row[key] for row in rows]) for key in keys}

    g_keys = ["http_answer", "accepted", "scheduled", "launch_returned", "first_node", "total"]
    launch = [r["total"] - r["scheduled"] for r in ours]
    return {
        "bench": "ray_launch",
        "mode": "server",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nodes": NODES,
        "gpus_per_node": GPUS_PER_NODE,
        "rounds": args.rounds,
        "settle_s": args.settle,
        "tick_s": args.tick,
        "node_timeout_s": args.node_timeout,
        "server_start_s": round(server_s, 2),
        "baseline_cluster_start_s": round(baseline.ready["cluster_start_s"], 2),
        "gpuyard": summary(g_total),
        "ray_baseline": summary(r_total),
        "ratio": round(ratio, 3),
        "paired_ratio_median": round(statistics.median(paired), 3),
        "overhead_ms": round((statistics.median(g_total) - statistics.median(r_total)) * 1000, 1),
        "target_ratio": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
        "gpuyard_from_submit": parts(ours, g_keys),
        "gpuyard_scheduled_to_all_running": summary(launch),
        "ray_from_t0": parts(theirs, ["pg_ready", "actors_started", "first_node", "total"]),
        "gpuyard_all_ms": [round(x * 1000, 1) for x in g_total],
        "ray_all_ms": [round(x * 1000, 1) for x in r_total],
        "server_exit_code_on_sigterm": server_rc,
        "left_after_stop_killed": left,
        "machine": {**info, "loadavg_1m_at_end": load_end},
    }


def human_server(r: dict[str, Any]) -> str:
    lines = [
        f"submit-to-all-nodes-running, {r['nodes']} nodes x {r['gpus_per_node']} GPUs, "
        f"{r['rounds']} rounds, load {r['machine']['loadavg_1m_at_start']} -> "
        f"{r['machine']['loadavg_1m_at_end']}",
    ]
    for name in ("gpuyard", "ray_baseline"):
        s = r[name]
        lines.append(f"  {name:13} median {s['median_ms']:7.1f} ms  min {s['min_ms']:7.1f}  "
                     f"max {s['max_ms']:7.1f}")  # fmt: skip
    lines.append(f"  ratio {r['ratio']:.3f} (paired rounds: {r['paired_ratio_median']:.3f}), "
                 f"target <= {r['target_ratio']}: {'met' if r['met'] else 'NOT met'}")  # fmt: skip
    lines.append("  gpuyard, from t0 (median / min / max ms):")
    for key, s in r["gpuyard_from_submit"].items():
        lines.append(f"    {key:16} {s['median_ms']:7.1f} {s['min_ms']:7.1f} {s['max_ms']:7.1f}")
    s = r["gpuyard_scheduled_to_all_running"]
    lines.append(f"    {'scheduled->all':16} {s['median_ms']:7.1f} {s['min_ms']:7.1f} "
                 f"{s['max_ms']:7.1f}")  # fmt: skip
    lines.append("  ray, from t0:")
    for key, s in r["ray_from_t0"].items():
        lines.append(f"    {key:16} {s['median_ms']:7.1f} {s['min_ms']:7.1f} {s['max_ms']:7.1f}")
    lines.append(f"  server exit code on SIGTERM: {r['server_exit_code_on_sigterm']}; killed after "
                 f"the stops: {r['left_after_stop_killed'] or 'nothing'}")  # fmt: skip
    return "\n".join(lines)


def _say(args: argparse.Namespace) -> Any:
    if args.json:
        return lambda *a: None
    return lambda *a: print(*a, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["server"], default="server")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="server mode: pause before each timed round, s")  # fmt: skip
    ap.add_argument("--node-timeout", type=float, default=1.5,
                    help="GPUYARD_RAY_NODE_TIMEOUT_S of both clusters")  # fmt: skip
    ap.add_argument("--tick", type=float, default=None,
                    help="server mode: the server's GPUYARD_TICK_S (default: its own)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    ap.add_argument("--baseline-worker", metavar="STATE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_worker:
        baseline_worker(args.baseline_worker, args.node_timeout)
        return
    result = run_server(args)
    out = json.dumps(result) if args.json else human_server(result)  # its "machine": machine()
    print(out, flush=True)


if __name__ == "__main__":
    main()
