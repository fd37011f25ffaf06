"""What reading a batch script's directives costs `gpuyard submit job.sh`.

- reading and resolving each script of the corpus (tests/data/sbatch/): microseconds per script;
- the submit path's own work for a plain command (build_submission + apply_batch, no script):
  microseconds per submit, what every `gpuyard submit -- CMD` now pays;
- importing `gpuyard.domain.sbatch` (on the fast start path): milliseconds, from a compiled
  .pyc, median of `-X importtime` runs.

    .venv/bin/python bench/sbatch_directives.py          # human-readable
    .venv/bin/python bench/sbatch_directives.py --json   # one JSON line

Standard library + gpuyard only.
"""

from __future__ import annotations

import argparse
import json
import py_compile
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import with_machine

from gpuyard.cli.commands import SubmitOptions
from gpuyard.cli.submitting import apply_batch, build_submission
from gpuyard.domain import sbatch

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "sbatch"


def per_script_us(rounds: int) -> float:
    texts = [p.read_text() for p in sorted(CORPUS.glob("*.sh"))]
    start = time.perf_counter()
    for _ in range(rounds):
        for text in texts:
            sbatch.resolve(sbatch.parse_directives(text).values)
    return (time.perf_counter() - start) / rounds / len(texts) * 1e6


def plain_submit_us(rounds: int) -> float:
    opts = SubmitOptions(["true"], gpus=1)
    start = time.perf_counter()
    for _ in range(rounds):
        argv, fields = build_submission(opts.command, None, None, [], True)
        apply_batch(opts, argv, fields, {})
    return (time.perf_counter() - start) / rounds * 1e6


def import_ms(runs: int) -> float:
    py_compile.compile(sbatch.__file__)  # as installed: from its .pyc
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c",
             "import gpuyard.domain.errors, gpuyard.domain.sbatch"],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        line = [x for x in out.splitlines() if x.endswith("gpuyard.domain.sbatch")][-1]
        times.append(int(line.split("|")[0].split(":")[1]) / 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--rounds", type=int, default=200, help="passes over the corpus")
    args = ap.parse_args()
    result = {
        "scripts": len(list(CORPUS.glob("*.sh"))),
        "directives_us_per_script": round(per_script_us(args.rounds), 1),
        "plain_submit_us": round(plain_submit_us(args.rounds * 10), 1),
        "import_ms": round(import_ms(9), 2),
    }
    if args.json:
        print(json.dumps(with_machine(result)))
        return
    print(f"corpus: {result['scripts']} scripts")
    print(f"  directives read + resolved: {result['directives_us_per_script']} us per script")
    print(f"  plain submit's fields (no script): {result['plain_submit_us']} us")
    print(f"  import gpuyard.domain.sbatch: {result['import_ms']} ms (from .pyc, median of 9)")


if __name__ == "__main__":
    main()
