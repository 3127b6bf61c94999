"""Run every ``benchmarks/bench_*.py`` in turn (same Python, separate processes) and report.

Each script prints its table and writes its own section of ``benchmarks/results.md``.

Usage::

    python benchmarks/run_all.py                # all of them
    python benchmarks/run_all.py -k metrics     # only scripts whose name contains "metrics"
    python benchmarks/run_all.py -- --device cuda   # extra arguments passed to every script
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--only", default="", help="substring a script name must contain")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per script")
    parser.add_argument("extra", nargs="*", help="arguments passed on to every script")
    args = parser.parse_args(argv)

    scripts = sorted(p for p in HERE.glob("bench_*.py") if args.only in p.stem)
    if not scripts:
        print(f"run_all: no benchmarks/bench_*.py matches {args.only!r}")
        return 1
    summary: list[tuple[str, str, float]] = []
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, str(script), *args.extra],
                cwd=HERE.parent,
                timeout=args.timeout,
                check=False,
            )
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timeout ({args.timeout:g} s)"
        summary.append((script.name, status, time.perf_counter() - start))

    print("\n=== summary ===")
    width = max(len(name) for name, _, _ in summary)
    for name, status, seconds in summary:
        print(f"{name:<{width}}  {status:<16} {seconds:8.1f} s")
    print(f"results: {HERE / 'results.md'}")
    return 0 if all(status == "ok" for _, status, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
