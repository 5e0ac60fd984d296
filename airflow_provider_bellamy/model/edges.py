"""Past the scale-outs a curve is known at: how the band continues it there, and how far those
continuations missed held-out runs (pure: numpy).

Beyond (or below) the scale-outs a context's curve was trained or tuned at, the network's basis
terms were fitted to nothing: ``RuntimeModel._curves`` continues the curve from the octave at
the edge (``continued_log_runtime``, ``power_law_log_runtime``, ``overhead_log_runtime``) and
the band spans those guesses, grown with the distance past the edge by how far the same guesses
missed the training contexts' own runs held out past their edges (``edge_misses``,
``edge_growth``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# where the band beyond the largest known scale-out reads the curve for Ernest's fit
OVERHEAD_POINTS = 16
# Fewer runs than this held out past an edge of the training contexts' own scale-outs
# (``edge_misses``) cannot say how far the guesses miss there: the band past that edge grows by
# the convention (widths of the known range) instead.
MIN_EDGE_POINTS = 8


def continued_log_runtime(ns: np.ndarray, known_n: np.ndarray, log_at_known: np.ndarray) -> np.ndarray:
    """Log seconds at ``ns`` on the curve a + b / n (Ernest's fixed cost and parallel work) that
    meets the model's curve at the scale-out it is known at nearest to ``ns`` (its largest, or its
    smallest) and follows its slope over the octave there (``known_n``, ending at that edge; b by
    least squares, so one bump of the curve near the edge does not set it); b is a perfect
    speed-up where the curve falls faster than that. Past those scale-outs the network's other
    basis terms were fitted to nothing: C3O pre-trained on 2-6 nodes over-predicted 8-12 by 9-13 %
    (log), this continuation by -6-0 % (docs/model.md, "Scale-outs larger than any trained").
    Below the edge a curve rising with n there (overhead) continues flat: fewer nodes do the same
    work no faster."""
    n, t = np.asarray(known_n, dtype=np.float64), np.exp(np.asarray(log_at_known, dtype=np.float64))
    x = 1.0 / n
    b = float(np.polyfit(x, t, 1)[0]) if len(n) > 1 and np.ptp(x) > 0 else 0.0
    edge, at_edge = float(n[-1]), float(t[-1])
    if b < 0 and edge <= n.min():
        b = 0.0
    a = at_edge - b / edge
    if a < 0:
        a, b = 0.0, at_edge * edge
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(a + b / np.asarray(ns, dtype=np.float64), 1e-12))


def power_law_log_runtime(ns: np.ndarray, known_n: np.ndarray, log_at_known: np.ndarray) -> np.ndarray:
    """Log seconds at ``ns`` on the power law that meets the model's curve at the edge it is known
    at (``known_n[-1]``) with the curve's least-squares log-log slope over ``known_n``: the rate it
    falls (or rises) at there, kept. Beside ``continued_log_runtime`` in the band past the edge:
    Amdahl's curve flattens, this one does not."""
    x = np.log(np.asarray(known_n, dtype=np.float64))
    y = np.asarray(log_at_known, dtype=np.float64)
    slope = float(np.polyfit(x, y, 1)[0]) if len(x) > 1 and np.ptp(x) > 0 else 0.0
    return y[-1] + slope * (np.log(np.asarray(ns, dtype=np.float64)) - x[-1])


def overhead_log_runtime(ns: np.ndarray, known_n: np.ndarray, log_at_known: np.ndarray) -> np.ndarray:
    """Log seconds at ``ns`` on Ernest's curve a + b / n + c log n + d n (every term >= 0: its
    non-negative least squares fit to the model's curve over ``known_n``, ascending, the whole
    range the curve is known at), offset to meet the curve at ``known_n[-1]``. Beyond that edge its
    overhead terms continue the coordination cost a curve that flattens there shows."""
    n = np.asarray(known_n, dtype=np.float64)
    t = np.exp(np.asarray(log_at_known, dtype=np.float64))

    def terms(values: np.ndarray) -> np.ndarray:
        return np.stack([np.ones_like(values), 1.0 / values, np.log(values), values], axis=-1)

    x = terms(n)
    scale = np.abs(x).max(axis=0)
    xs = x / scale
    theta, best = np.zeros(4), math.inf
    # four terms: the exact non-negative least squares is the best fit among the active sets whose
    # coefficients all come out non-negative (no scipy import on the sizing path)
    for active in range(1, 2**4):
        cols = [j for j in range(4) if active >> j & 1]
        fit = np.linalg.lstsq(xs[:, cols], t, rcond=None)[0]
        error = float(np.sum((xs[:, cols] @ fit - t) ** 2))
        if (fit >= 0).all() and error < best:
            best, theta = error, np.zeros(4)
            theta[cols] = fit
    theta = theta / scale
    at, edge = terms(np.asarray(ns, dtype=np.float64)) @ theta, float(terms(n[-1:])[0] @ theta)
    if edge <= 0:
        return np.full(len(at), float(log_at_known[-1]))
    return np.log(np.maximum(at, edge * 1e-6)) - math.log(edge) + float(log_at_known[-1])


@dataclass(frozen=True)
class EdgeMisses:
    """How far the guesses past an edge (``RuntimeModel._curves``, ``band``) missed runs held out
    past it, in log seconds, per run: ``lower`` how far the run lay under the lowest guess,
    ``upper`` over the highest (negative where the guesses spanned it), ``octaves`` how far it lay
    past the edge (log2 of the ratio of the scale-outs)."""

    lower: np.ndarray
    upper: np.ndarray
    octaves: np.ndarray


def edge_misses(
    scale_outs: Sequence[int], log_runtimes: Sequence[Sequence[float | None]], side: int
) -> EdgeMisses | None:
    """Each training context's curve (its mean log runtime per scale-out of ``scale_outs``, None
    where it has none) with a third of its own scale-outs held out at ``side`` (0: the smallest,
    1: the largest; at least one, two kept), continued from the kept runs by the guesses the band
    spans past an edge from the curve alone (Amdahl's curve and the power law over the octave at
    the edge; beyond it also Ernest's four terms over the kept range), and compared with the held-out
    runs. The runs themselves, not the model's curve: the model was trained on the held-out runs
    too, so its curve at the edge would already bend towards them. None where no context has three
    scale-outs."""
    lower, upper, octaves = [], [], []
    grid = np.asarray(scale_outs, dtype=np.float64)
    for row in log_runtimes:
        values = np.array([np.nan if v is None else float(v) for v in row], dtype=np.float64)
        known = np.isfinite(values)
        n, y = grid[known], values[known]
        if len(n) < 3:
            continue
        held = math.ceil(len(n) / 3)
        if side:
            kept_n, kept_y, out_n, out_y = n[:-held], y[:-held], n[-held:], y[-held:]
            edge = kept_n[-1]
            octave = kept_n >= edge / 2
            octave[-2:] = True  # (two runs at least: a slope)
            known_n, at_known = kept_n[octave], kept_y[octave]
        else:
            kept_n, kept_y, out_n, out_y = n[held:], y[held:], n[:held], y[:held]
            edge = kept_n[0]
            octave = kept_n <= edge * 2
            octave[:2] = True
            # (descending: the continuation reads the edge last)
            known_n, at_known = kept_n[octave][::-1], kept_y[octave][::-1]
        guesses = [
            continued_log_runtime(out_n, known_n, at_known),
            power_law_log_runtime(out_n, known_n, at_known),
        ]
        if side:
            guesses.append(overhead_log_runtime(out_n, kept_n, kept_y))
        stacked = np.stack(guesses)
        lower.append(stacked.min(axis=0) - out_y)
        upper.append(out_y - stacked.max(axis=0))
        octaves.append(np.abs(np.log2(out_n / edge)))
    if not octaves:
        return None
    return EdgeMisses(np.concatenate(lower), np.concatenate(upper), np.concatenate(octaves))


def edge_growth(
    misses: np.ndarray, octaves: np.ndarray, distance: np.ndarray, confidence: float
) -> np.ndarray:
    """How far past an edge the guesses may miss, at ``distance`` octaves from it: the rate per
    octave that would have held ``confidence`` of the held-out runs' ``misses`` at their
    ``octaves`` (``edge_misses``; the ⌈(n+1)q⌉-th smallest of the n misses / octaves), times
    the distance; never negative (the spanned guesses stay the least band), 0 where ``distance`` is."""
    misses, octaves = np.asarray(misses, dtype=np.float64), np.asarray(octaves, dtype=np.float64)
    distance = np.asarray(distance, dtype=np.float64)
    if not len(misses):
        return np.zeros(len(distance))
    rates = np.sort(misses / np.maximum(octaves, 1e-9))
    rate = max(float(rates[min(len(rates), math.ceil((len(rates) + 1) * confidence)) - 1]), 0.0)
    return rate * np.maximum(distance, 0.0)


def last_octave(edges: tuple[int, int]) -> np.ndarray:
    """Where the continuation beyond ``edges[1]`` reads the curve's slope: 8 points from half
    that scale-out (or the smallest known, if larger) up to it."""
    low, high = edges
    return np.geomspace(max(low, high / 2), high, 8)


def first_octave(edges: tuple[int, int]) -> np.ndarray:
    """Where the continuation below ``edges[0]`` reads the curve's slope: 8 points from twice
    that scale-out (or the largest known, if smaller) down to it (the edge last, as
    ``continued_log_runtime`` reads it)."""
    low, high = edges
    return np.geomspace(min(high, low * 2), low, 8)


def edge_octave(edges: tuple[int, int], side: int) -> np.ndarray:
    """The octave the continuation past ``edges[side]`` reads (0: below, 1: beyond)."""
    return last_octave(edges) if side else first_octave(edges)


@dataclass(frozen=True)
class Continuation:
    """Where a curve is continued past the scale-outs it is known at (``RuntimeModel._curves``):
    the edges, which scale-outs lie below and beyond them, and the guesses the band spans there
    besides the prediction and the network's curve, in log seconds: Amdahl's curve, the power law
    and (below the edge, where the prediction lies halfway to it) the model's own curve; NaN where
    a guess does not stand (inside the edges, or where the curve at the edge is itself no curve)."""

    edges: tuple[int, int]
    below: np.ndarray
    beyond: np.ndarray
    guesses: tuple[np.ndarray, ...]
