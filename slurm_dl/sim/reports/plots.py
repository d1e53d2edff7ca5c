"""Plots of simulation results (matplotlib, Agg backend): JCT CDF per policy, queue length."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .metrics import jct, queue_series


def write_plots(out_dir: Path, runs: Sequence[tuple[str, list]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, results in runs:
        xs = sorted(jct(sj) for r in results for sj in r.jobs)
        n = len(xs)
        step = max(1, n // 2000)
        pts = xs[::step] + ([xs[-1]] if xs else [])
        ax.plot(
            pts,
            [min(1.0, (i * step + 1) / n) for i in range(len(pts) - 1)] + [1.0] if pts else [],
            label=name,
        )
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    ax.grid(alpha=0.3)
    cdf = out_dir / "jct_cdf.png"
    fig.savefig(cdf, dpi=110, bbox_inches="tight")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, results in runs:
        ts, qs = queue_series(results)
        if ts:
            t0 = ts[0]
            ax.step([(t - t0) / 86400 for t in ts], qs, where="post", label=name)
    ax.set_xlabel("days since first submission")
    ax.set_ylabel("pending jobs")
    ax.legend()
    ax.grid(alpha=0.3)
    q = out_dir / "queue_length.png"
    fig.savefig(q, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [cdf, q]
