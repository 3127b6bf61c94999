# ruff: noqa: E501 - the cases are one call per line, run as code in a fresh process
"""The EECE before and after issue 23 on fixed seeds: values, point bins and per-bin terms.

Runs the same 16 calls (binary, top-label, classwise default / exact / seeds / subsample /
coreset, fitted centroids, explicit bins, a generator, the scikit-learn backend, a positional
``n_bins``) with the code of a previous commit (``git archive`` into a temporary folder, a fresh
process) and with this tree, in the old keyword form both times, and prints whether each result
is identical (EECE value, and SHA-1 digests of the point bins, counts and signed terms).

Run: ``python benchmarks/compare_eece_before_after.py [--rev f8ca19a]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = r"""
import hashlib, json, warnings
import torch
warnings.simplefilter("ignore")
from bensemble.metrics import expected_epistemic_calibration_error as eece, fit_bins

def members(h, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=torch.float64)
    z = z + 2 * torch.randn(1, n, k, generator=g, dtype=torch.float64)
    return torch.softmax(z, -1), torch.randint(k, (n,), generator=g)

def digest(t):
    return hashlib.sha1(t.contiguous().numpy().tobytes()).hexdigest()[:16]

p5, y5 = members(4, 300, 5, 0)
p2, y2 = members(5, 300, 2, 1)
pb = p2[:, :, 1]
eu = torch.rand(300, generator=torch.Generator().manual_seed(9), dtype=torch.float64) * 0.01
cents = [fit_bins(p5[:, :150, c].T, 8, seed=2) for c in range(5)]
top = fit_bins(p5[:, :150, 0].T, 6, seed=4)
ids = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(3)) * 3
g11 = lambda: torch.Generator().manual_seed(11)
cases = {
    "binary": lambda: eece(pb, y2, n_bins=12, seed=0, binary=True, return_details=True),
    "binary auto": lambda: eece(pb, y2, seed=5, binary=True, return_details=True),
    "binary eu": lambda: eece(pb, y2, n_bins=10, seed=0, binary=True, eu=eu, return_details=True),
    "top-label": lambda: eece(p5, y5, n_bins=10, multiclass="top_label", seed=3, return_details=True),
    "classwise": lambda: eece(p5, y5, n_bins=15, seed=1, return_details=True),
    "classwise exact": lambda: eece(p5, y5, n_bins=15, seed=1, lloyd_rtol=0.0, return_details=True),
    "classwise n_seeds=3": lambda: eece(p5, y5, n_bins=9, seed=2, n_seeds=3, return_details=True),
    "classwise subsample": lambda: eece(p5, y5, n_bins=7, seed=0, subsample=120, refine=1, return_details=True),
    "classwise coreset": lambda: eece(p5, y5, n_bins=7, seed=0, coreset=60, return_details=True),
    "kmeans_fit": lambda: eece(p5[:, 150:], y5[150:], binning="kmeans_fit", centroids=cents, return_details=True),
    "kmeans_fit top-label": lambda: eece(p5[:, 150:], y5[150:], binning="kmeans_fit", centroids=top, multiclass="top_label", return_details=True),
    "bins": lambda: eece(p5, y5, bins=ids, return_details=True),
    "bins binary": lambda: eece(pb, y2, bins=ids, binary=True, return_details=True),
    "generator": lambda: eece(pb, y2, n_bins=8, generator=g11(), binary=True, return_details=True),
    "sklearn": lambda: eece(pb, y2, n_bins=8, seed=0, backend="sklearn", binary=True, return_details=True),
    "positional n_bins": lambda: eece(p5, y5, 6, seed=0, return_details=True),
}
out = {}
for name, call in cases.items():
    d = call()
    out[name] = [d.value, digest(d.point_bins), digest(d.counts), digest(d.terms)]
print(json.dumps(out))
"""


def run(pythonpath: str) -> dict:
    env = {"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CASES], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="f8ca19a", help="the commit before (f8ca19a)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as old:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.rev, "bensemble"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        before = run(old)
    after = run(str(ROOT))
    same = 0
    for name, value in before.items():
        ok = after[name] == value
        same += ok
        print(
            f"{name:24s} {'identical' if ok else 'DIFFERENT'}  EECE {value[0]:.12g} -> {after[name][0]:.12g}"
        )
    print(f"{same} of {len(before)} identical (value, point bins, counts, terms)")
    return 0 if same == len(before) else 1


if __name__ == "__main__":
    sys.exit(main())
