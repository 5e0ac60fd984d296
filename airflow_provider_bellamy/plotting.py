"""Plots of sizing decisions: predicted runtime per scale-out with its band, the target,
the chosen size and the observed run. matplotlib is imported only when plotting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plot_decisions(
    decisions: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "Bellamy sizing decisions",
) -> Path:
    """One panel per decision: mean prediction and band over the candidates, the target, the
    chosen scale-out and, when recorded, the run it led to (matched by ``decision_id``)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    if not decisions:
        from airflow_provider_bellamy.exceptions import InvalidInputError

        raise InvalidInputError("decisions", [], "nothing to plot")
    by_decision = {r.get("decision_id"): r for r in runs if r.get("decision_id") is not None}
    fig, axes = plt.subplots(1, len(decisions), figsize=(5.2 * len(decisions), 4.2), squeeze=False)
    for ax, decision in zip(axes[0], decisions, strict=True):
        # a default decision (no model) has candidates without predictions: nothing to draw
        cands = sorted(
            (c for c in decision.get("candidates") or [] if c.get("predicted_s") is not None),
            key=lambda c: c["scale_out"],
        )
        label = f"{decision.get('task_id') or decision['job_type']} ({decision['job_type']})"
        if cands:
            xs = [c["scale_out"] for c in cands]
            mean = [c["predicted_s"] for c in cands]
            lower = [c["lower_s"] if c["lower_s"] is not None else c["predicted_s"] for c in cands]
            upper = [c["upper_s"] if c["upper_s"] is not None else c["predicted_s"] for c in cands]
            ax.fill_between(xs, lower, upper, alpha=0.25, label=f"{decision['confidence']:.0%} band")
            ax.plot(xs, mean, marker="o", label="predicted runtime")
        target = decision.get("target_s")
        if target:
            ax.axhline(target, color="tab:red", linestyle="--", label=f"target {target:.0f} s")
        ax.axvline(decision["chosen_scale_out"], color="tab:green", linestyle=":", label="chosen")
        run = by_decision.get(decision.get("id") or decision.get("decision_id"))
        if run is not None:
            ax.scatter(
                [run["scale_out"]],
                [run["runtime_s"]],
                color="black",
                zorder=5,
                label=f"observed {run['runtime_s']:.1f} s",
            )
        ax.set_title(label)
        ax.set_xlabel("scale-out (executors)")
        ax.set_ylabel("runtime (s)")
        if cands:
            ax.set_xticks([c["scale_out"] for c in cands])
        else:
            ax.text(0.5, 0.6, "no model answer:\ndefault scale-out", ha="center", transform=ax.transAxes)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
