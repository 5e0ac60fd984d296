"""Plots of sizing decisions: per task, the predicted runtime per scale-out with its band
for each launch, the target, the chosen size and the observed run. matplotlib is
imported only when plotting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.decisions import format_confidence


def require_matplotlib() -> Any:
    """matplotlib, or an error naming the extra that brings it (a plain install has none)."""
    try:
        import matplotlib
    except ImportError:
        from airflow_provider_bellamy.exceptions import BellamyError

        raise BellamyError(
            "plotting needs matplotlib, which a plain install does not bring: "
            "pip install 'airflow-provider-bellamy[plot]'"
        ) from None
    return matplotlib


def plot_decisions(
    decisions: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "Bellamy sizing decisions",
) -> Path:
    """One panel per task (or job type); one curve per decision of it, oldest first, with the
    run each decision led to (matched by decision id) as a point of the same colour."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    if not decisions:
        from airflow_provider_bellamy.exceptions import InvalidInputError

        raise InvalidInputError("decisions", [], "nothing to plot")
    by_decision = {r.get("decision_id"): r for r in runs if r.get("decision_id") is not None}
    panels: dict[str, list[Mapping[str, Any]]] = {}
    for d in decisions:
        panels.setdefault(str(d.get("task_id") or d["job_type"]), []).append(d)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.4), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, group) in zip(axes[0], panels.items(), strict=True):
        ticks: set[int] = set()
        for i, decision in enumerate(group):
            colour = colours[i % len(colours)]
            tag = f"launch {i + 1}" if len(group) > 1 else "launch"
            model = decision.get("model_version") or "no model"
            # a default decision (no model) has candidates without predictions: nothing to draw
            cands = sorted(
                (c for c in decision.get("candidates") or [] if c.get("predicted_s") is not None),
                key=lambda c: c["scale_out"],
            )
            if cands:
                xs = [c["scale_out"] for c in cands]
                ticks.update(xs)
                lower = [c["lower_s"] if c["lower_s"] is not None else c["predicted_s"] for c in cands]
                upper = [c["upper_s"] if c["upper_s"] is not None else c["predicted_s"] for c in cands]
                ax.fill_between(xs, lower, upper, alpha=0.18, color=colour)
                ax.plot(
                    xs,
                    [c["predicted_s"] for c in cands],
                    marker="o",
                    color=colour,
                    label=f"{tag}: predicted ({model}), {format_confidence(decision['confidence'])} band",
                )
            ax.scatter(
                [decision["chosen_scale_out"]], [0], marker="^", s=80, color=colour, zorder=6, clip_on=False
            )
            run = by_decision.get(decision.get("id") or decision.get("decision_id"))
            if run is not None:
                ticks.add(int(run["scale_out"]))
                ax.scatter(
                    [run["scale_out"]],
                    [run["runtime_s"]],
                    marker="*",
                    s=180,
                    color=colour,
                    edgecolor="black",
                    zorder=7,
                    label=f"{tag}: observed {run['runtime_s']:.1f} s at {run['scale_out']}",
                )
            target = decision.get("target_s")
            if target:
                ax.axhline(
                    target, color=colour, linestyle="--", linewidth=1, label=f"{tag}: target {target:.0f} s"
                )
        ax.set_title(f"{name} ({group[0]['job_type']}) — ▲ chosen scale-out")
        ax.set_xlabel("scale-out (executors)")
        ax.set_ylabel("runtime (s)")
        if ticks:
            ax.set_xticks(sorted(ticks))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
