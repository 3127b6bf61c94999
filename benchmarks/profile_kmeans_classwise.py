"""Where the time of one classwise K-means fit goes, and what else was tried (one torch thread,
CPU time, the workload of ``bench_eece_classwise.py``: H = 10, 100 bins, K = 1000 one-vs-rest
member vectors).

* ``--profile``: seeding vs Lloyd per class at N = 1,000 ... 50,000 (per-op cost shows at small N),
  and the two kernels of one Lloyd step at N = 50,000 (the float32 distance block and its argmin).
* ``--subsample``: fitting on 10,000 / 20,000 rows with 2 / 5 refinement passes over all 50,000
  rows: CPU time and inertia against the full fit.
* ``--pruned``: exact triangle-inequality pruning (``benchmarks/_kmeans_pruned.py``) against the
  dense fit: CPU time and inertia.
* ``--stopping``: the cheaper fits against the exact one, per class: Lloyd stopped by the
  relative-inertia rule (``lloyd_rtol`` 1e-3, 3e-4: the classwise default) and the coreset fit
  (10,000 rows), at N = 50,000 / 100 bins / H = 10 (8 classes of K = 100 and of K = 1000) and
  at N = 10,000 / 20 bins / H = 6 (4 classes of K = 10, 100, 1000): CPU-time ratio and the
  within-bin sum of squares (inertia) over the exact fit's, worst class and mean; also the
  exact fit's own seed 1 against seed 0.
* ``--imagenet``: ``bench_eece_classwise.py``'s ImageNet-like classes at K = 1000, N = 50,000,
  200 bins: the classwise path's sampled seeding of 8 classes against the dense per-class
  seeding, and the classwise fit of 100 classes with chunks of 2^20 / 2^22
  elements of sorted rows.

Run: ``python benchmarks/profile_kmeans_classwise.py [--profile] [--subsample] [--pruned]
[--stopping] [--imagenet]`` (the first three without flags). Prints only; the figures are quoted in
``benchmarks/results.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _kmeans_pruned  # noqa: E402
from bench_eece_classwise import within_ss as _within_ss  # noqa: E402

from bensemble.metrics.binning._fit import _fit  # noqa: E402
from bensemble.metrics.binning._lloyd import _kmeans_plusplus  # noqa: E402
from bensemble.metrics.binning._nearest import _argmin_rows, _assign, _chunk_rows  # noqa: E402

N_BINS, H = 100, 10


def _class_vectors(n_classes: int, classes: int, n: int) -> list[torch.Tensor]:
    """Member vectors of ``classes`` one-vs-rest tasks of a ``n_classes``-class problem whose
    members disagree: ``sigmoid(z - log(K - 1) + 2 u)``, ``z`` per member and point, ``u`` per
    point (the workload of the measurements quoted in ``benchmarks/results.md``)."""
    g = torch.Generator().manual_seed(n_classes)
    out = []
    for _ in range(classes):
        z = torch.randn(n, H, generator=g, dtype=torch.float64)
        u = torch.randn(n, 1, generator=g, dtype=torch.float64)
        out.append(torch.sigmoid(z - math.log(n_classes - 1) + 2 * u))
    return out


def _cpu(fn, repeats: int = 1):
    fn()
    t = time.process_time()
    for _ in range(repeats):
        out = fn()
    return (time.process_time() - t) / repeats, out


def profile() -> None:
    for n in (1000, 5000, 10000, 50000):
        (x,) = _class_vectors(1000, 1, n)
        t_fit, fit = _cpu(lambda x=x: _fit(x, N_BINS, seed=0))
        t_seed, _ = _cpu(
            lambda x=x: _kmeans_plusplus(x.float(), N_BINS, torch.Generator().manual_seed(0))
        )
        per_step = (t_fit - t_seed) / fit.n_iter
        print(
            f"N={n:>6}: fit {t_fit * 1e3:6.1f} ms = seeding {t_seed * 1e3:5.1f} ms + "
            f"{fit.n_iter} Lloyd steps of {per_step * 1e3:.2f} ms (+ final assignment)"
        )
    (x,) = _class_vectors(1000, 1, 50_000)
    x = x.float()
    c = x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))[:N_BINS]]
    c_sq, c_t = (c * c).sum(1), c.T.contiguous()
    step = _chunk_rows(N_BINS)
    block = torch.empty(step, N_BINS)
    chunks = range(0, x.shape[0], step)

    def products():
        for s in chunks:
            xb = x[s : s + step]
            torch.addmm(c_sq, xb, c_t, alpha=-2.0, out=block[: xb.shape[0]])

    def argmins():
        for _ in chunks:
            _argmin_rows(block)

    t_mm, _ = _cpu(products, 10)
    t_arg, _ = _cpu(argmins, 10)
    print(
        f"one Lloyd step at N=50,000: distance blocks (addmm) {t_mm * 1e3:.2f} ms, row argmin "
        f"{t_arg * 1e3:.2f} ms"
    )


def _inertia(x, centroids) -> float:
    return float(_assign(x, centroids, with_distances=True)[1].sum())


def subsample() -> None:
    xs = _class_vectors(1000, 3, 50_000)
    t_full, full = _cpu(lambda: [_fit(x, N_BINS, seed=0).centroids for x in xs])
    ref = [_inertia(x, c) for x, c in zip(xs, full, strict=True)]
    print(f"full fit on 50,000 rows, 3 classes: {t_full:.2f} s")
    for rows, refine in ((10_000, 2), (10_000, 5), (20_000, 2), (20_000, 5)):
        t, cents = _cpu(
            lambda rows=rows, refine=refine: [
                _fit(x, N_BINS, seed=0, subsample=rows, refine=refine).centroids for x in xs
            ]
        )
        rel = [(_inertia(x, c) - r) / r for x, c, r in zip(xs, cents, ref, strict=True)]
        print(
            f"subsample {rows:,} + {refine} refinements: {t:.2f} s ({t_full / t:.2f}x), inertia "
            + ", ".join(f"{v:+.2%}" for v in rel)
        )


def pruned() -> None:
    for n_classes in (100, 1000):
        xs = _class_vectors(n_classes, 2, 50_000)
        for x in xs:
            t_dense, dense = _cpu(lambda x=x: _fit(x, N_BINS, seed=0))
            tol_abs = 1e-4 * float(x.var(dim=0, unbiased=False).mean())

            def prune(x=x, tol_abs=tol_abs):
                g = torch.Generator().manual_seed(0)
                return _kmeans_pruned._fit_torch(x, N_BINS, g, 300, tol_abs)[0]

            t_pruned, cents = _cpu(prune)
            rel = (_inertia(x, cents) - dense.inertia) / dense.inertia
            print(
                f"K={n_classes}: dense {t_dense:.3f} s, pruned {t_pruned:.3f} s "
                f"({t_dense / t_pruned:.2f}x), inertia {rel:+.2e}"
            )


def _one_vs_rest(n_classes: int, classes: int, n: int, h: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(classes):
        z = torch.randn(n, h, generator=g, dtype=torch.float64)
        u = torch.randn(n, 1, generator=g, dtype=torch.float64)
        out.append(torch.sigmoid(z - math.log(n_classes - 1) + 2 * u))
    return out


def stopping() -> None:
    variants = {
        "lloyd_rtol=1e-3": {"lloyd_rtol": 1e-3},
        "lloyd_rtol=3e-4 (default)": {"lloyd_rtol": 3e-4},
        "coreset=10,000": {"coreset": 10_000},
    }
    cases = [
        (f"K={k}, N=50,000, 100 bins, H=10", _class_vectors(k, 8, 50_000), 100, {})
        for k in (100, 1000)
    ]
    cases += [
        (
            f"K={k}, N=10,000, 20 bins, H=6",
            _one_vs_rest(k, 4, 10_000, 6),
            20,
            {"coreset=10,000": {"coreset": 2000}},
        )
        for k in (10, 100, 1000)
    ]
    for name, xs, bins, override in cases:
        t_exact, exact = _cpu(lambda xs=xs, bins=bins: [_fit(x, bins, seed=0) for x in xs])
        ref = [_within_ss(x, _assign(x, f.centroids)[0]) for x, f in zip(xs, exact, strict=True)]
        other = [
            _within_ss(x, _assign(x, _fit(x, bins, seed=1).centroids)[0]) / r - 1
            for x, r in zip(xs, ref, strict=True)
        ]
        print(
            f"{name}: exact {t_exact / len(xs) * 1e3:.0f} ms/class; exact seed 1 vs 0: "
            f"{min(other):+.2%} .. {max(other):+.2%}"
        )
        for label, options in variants.items():
            options = override.get(label, options)
            t, fits = _cpu(
                lambda xs=xs, o=options, bins=bins: [_fit(x, bins, seed=0, **o) for x in xs]
            )
            rel = [
                _within_ss(x, _assign(x, f.centroids)[0]) / r - 1
                for x, f, r in zip(xs, fits, ref, strict=True)
            ]
            print(
                f"  {label} {options}: {t_exact / t:.2f}x less CPU, inertia worst "
                f"{max(rel):+.2%}, mean {sum(rel) / len(rel):+.2%}"
            )


def imagenet() -> None:
    from bench_eece_classwise import members

    from bensemble.metrics.binning import _classes, _subsample_seed
    from bensemble.metrics.binning._classes import _prepare, fit_classes
    from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL

    bins, keep = 200, list(range(0, 1000, 10))
    p, _ = members("imagenet-like", 50_000, 1000, keep=keep)
    x32 = torch.stack([_prepare(p[:, :, k].T, bins, 0, None, 1e-4)[1].float() for k in range(8)])

    def gens():
        return [torch.Generator().manual_seed(0) for _ in range(8)]

    tols = [0.0] * 8
    t_sampled, _ = _cpu(lambda: _subsample_seed.seed(x32, bins, gens(), tols))
    t_dense, _ = _cpu(
        lambda: [_kmeans_plusplus(x, bins, torch.Generator().manual_seed(0)) for x in x32]
    )
    print(
        f"seeding 8 classes: sampled ({_subsample_seed.INIT_ROWS} rows, weighted k-means++ and "
        f"Lloyd on the sample) {t_sampled:.2f} s, dense k-means++ on every row {t_dense:.2f} s"
    )
    options = dict(subsample=None, refine=0, max_iter=300, tol=1e-4, coreset=None)
    for size in (1 << 20, 1 << 22):
        _classes.MAX_CHUNK_ELEMENTS = size
        t0 = time.process_time()
        fit_classes(
            lambda k: p[:, :, k].T.contiguous(),
            len(keep),
            bins,
            seed=0,
            fallback=None,
            lloyd_rtol=DEFAULT_LLOYD_RTOL,
            **options,
        )
        t = time.process_time() - t0
        print(f"fit of {len(keep)} classes, chunks of {size} elements: {t:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--subsample", action="store_true")
    parser.add_argument("--pruned", action="store_true")
    parser.add_argument("--stopping", action="store_true")
    parser.add_argument("--imagenet", action="store_true")
    args = parser.parse_args(argv)
    if args.imagenet:
        torch.set_num_threads(1)
        imagenet()
        return 0
    if args.stopping:
        torch.set_num_threads(1)
        stopping()
        return 0
    everything = not (args.profile or args.subsample or args.pruned)
    torch.set_num_threads(1)
    if args.profile or everything:
        profile()
    if args.subsample or everything:
        subsample()
    if args.pruned or everything:
        pruned()
    return 0


if __name__ == "__main__":
    sys.exit(main())
