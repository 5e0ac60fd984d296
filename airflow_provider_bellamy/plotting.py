"""Plots of sizing decisions: per task, the predicted runtime per scale-out with its band
for each launch, the target, the chosen size and the observed run. matplotlib is
imported only when plotting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.decisions import band_holds, format_confidence


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
        values: list[float] = []
        targets: set[int] = set()
        unbounded: list[tuple[list[int], list[float | None], list[float | None], str, str | None]] = []
        for i, decision in enumerate(group):
            colour = colours[i % len(colours)]
            run = by_decision.get(decision.get("id") or decision.get("decision_id"))
            curve, observed = launch_labels(decision, run, i if len(group) > 1 else None)
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
                values.extend([*lower, *upper])
                # an extrapolating decision's band hatched: the eye finds it before the legend
                hatch = "//" if _extrapolating(decision) else None
                if any(c["upper_s"] is None or (c["lower_s"] or 0) <= 0 for c in cands):
                    # no bound on a side (a guess: 0 – ∞): drawn to the panel's edge once it has one
                    unbounded.append(
                        (xs, [c["lower_s"] for c in cands], [c["upper_s"] for c in cands], colour, hatch)
                    )
                else:
                    ax.fill_between(xs, lower, upper, alpha=0.18, color=colour, hatch=hatch)
                ax.plot(xs, [c["predicted_s"] for c in cands], marker="o", color=colour, label=curve)
            # the chosen size: a triangle on the x axis, whatever the y scale
            ax.scatter(
                [decision["chosen_scale_out"]],
                [0],
                marker="^",
                s=80,
                color=colour,
                zorder=6,
                clip_on=False,
                transform=ax.get_xaxis_transform(),
            )
            if run is not None:
                ticks.add(int(run["scale_out"]))
                values.append(float(run["runtime_s"]))
                ax.scatter(
                    [run["scale_out"]],
                    [run["runtime_s"]],
                    marker="*",
                    s=180,
                    color=colour,
                    edgecolor="black",
                    zorder=7,
                    label=observed,
                )
            target = decision.get("target_s")
            if target and round(target) not in targets:  # one line per target, not per launch
                targets.add(round(target))
                values.append(float(target))
                ax.axhline(target, color=colour, linestyle="--", linewidth=1, label=f"target {target:.0f} s")
        ax.set_title(f"{name} ({group[0]['job_type']}) — ▲ chosen scale-out")
        ax.set_xlabel("scale-out (executors)")
        ax.set_ylabel("runtime (s)")
        if ticks:
            ax.set_xticks(sorted(ticks))
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 20 * min(positive):
            # a band out of distribution spans decades: on a linear axis the later launches,
            # and what happened, would be a flat line at the bottom
            ax.set_yscale("log")
            ax.set_ylabel("runtime (s, log scale)")
        else:
            ax.set_ylim(bottom=0)
        limits = ax.get_ylim()
        for xs, low, high, colour, hatch in unbounded:
            edges = band_to_edges(low, high, limits)
            ax.fill_between(xs, *edges, alpha=0.18, color=colour, hatch=hatch)
        ax.set_ylim(*limits)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            # below the panel: inside it would cover the bands
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def band_to_edges(
    lower: Sequence[float | None], upper: Sequence[float | None], limits: tuple[float, float]
) -> tuple[list[float], list[float]]:
    """A band's bounds as drawn in a panel with y ``limits``: no upper bound (None, stored for ∞)
    reaches the top, a lower bound of 0 (or none) the bottom."""
    bottom, top = limits
    return (
        [bottom if v is None or v <= 0 else float(v) for v in lower],
        [top if v is None else float(v) for v in upper],
    )


def _extrapolating(decision: Mapping[str, Any]) -> bool:
    ext = decision.get("extrapolation") or {}
    return bool(ext.get("known", True) and (ext.get("kinds") or ext.get("job_type_unseen")))


def launch_labels(
    decision: Mapping[str, Any], run: Mapping[str, Any] | None, index: int | None
) -> tuple[str, str]:
    """The legend's words for one decision's curve and for the run it led to: the model, the
    band's confidence, whether the model extrapolated, and whether the run landed in the band."""
    tag = "launch" if index is None else f"launch {index + 1}"
    # a fine-tuned copy's label names its parent: "grep/ctx-…/v1 (from grep/v1)"
    model = str(decision.get("model_version") or "no model").split(" (from ")[0]
    if "/ctx-" in model:
        job, rest = model.split("/ctx-", 1)
        model = f"{job}/ctx-{rest[:6]}…/{rest.rsplit('/', 1)[-1]}" if "/" in rest else model
    flag = ", extrapolating" if _extrapolating(decision) else ""
    curve = f"{tag}: predicted ({model}), {format_confidence(decision['confidence'])} band{flag}"
    if run is None:
        return curve, ""
    held = band_holds(decision.get("candidates") or [], int(run["scale_out"]), float(run["runtime_s"]))
    where = {True: " — in band", False: " — OUTSIDE band", None: ""}[held]
    if run.get("status", "success") != "success":
        where = f" ({run['status']})"
    return curve, f"{tag}: observed {run['runtime_s']:.1f} s at {run['scale_out']}{where}"
