"""``RuntimeModel``: pre-train across contexts, fine-tune on one, predict with a calibrated band."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError, UnknownJobTypeError
from airflow_provider_bellamy.model.features import FeatureSchema, context_of, scale_out_basis
from airflow_provider_bellamy.model.network import N_BASIS, BellamyNet, log_runtime
from airflow_provider_bellamy.model.training import (
    MAX_K,
    QUANTILE_GRID,
    EncodedRuns,
    TrainingConfig,
    context_folds,
    empirical_prior_covariance,
    encode_runs,
    fit_delta,
    fit_delta_averaged,
    noise_sd_of,
    pick_points,
    quantile_table,
    single_thread,
    train_ensemble,
)
from airflow_provider_bellamy.records import (
    context_columns,
    validate_confidence,
    validate_runs,
    validate_scale_out_list,
)

if TYPE_CHECKING:
    # pandas only arrives with training data: loading a stored model to predict needs none
    import pandas as pd

FORMAT = "bellamy-runtime-model/2"  # bump when tensors or header change meaning
DEFAULT_PRIOR_SD = 0.2
# Calibration keeps the smallest clusters apart: at the smallest trained scale-outs (≤ 1.5 × the
# minimum) memory pressure makes runtimes erratic (C3O: 3× to 25× jumps at 2 nodes), and one
# pooled residual table would widen every other scale-out's band by their spread.
SMALLEST_SCALE_OUT_FACTOR = 1.5
MIN_BUCKET_RESIDUALS = 20
PRIOR_SCALES = (0.25, 0.5, 1.0, 2.0)  # × the empirical prior covariance's standard deviations
LIKELIHOOD_FACTORS = (1.0, 2.0, 4.0)
_CALIBRATION_DRAWS = 4


def _context_key(ctx: Mapping[str, str | float]) -> str:
    return json.dumps(sorted(ctx.items()), default=str)


def _frame_contexts(frame: pd.DataFrame) -> list[dict[str, str | float]]:
    cols = context_columns(frame.columns)
    props = frame[cols].to_dict(orient="records") if cols else [{} for _ in range(len(frame))]
    return [
        context_of(job, {**p, "framework": fw})
        for job, fw, p in zip(frame["job_type"], frame["framework"], props, strict=True)
    ]


def _training_frame(runs: pd.DataFrame, what: str) -> pd.DataFrame:
    frame = validate_runs(runs, where=what)
    if "status" in frame.columns:
        frame = frame[frame["status"].fillna("success") == "success"].reset_index(drop=True)
        if frame.empty:
            raise InvalidInputError(what, "<no successful runs>", "every run given has status 'failed'")
    return frame


def _scale_outs(values: Sequence[int]) -> np.ndarray:
    return np.array(validate_scale_out_list(values), dtype=np.int64)


class RuntimeModel:
    """A Bellamy ensemble, general or fine-tuned to one context."""

    def __init__(
        self,
        net: BellamyNet,
        schema: FeatureSchema,
        metadata: dict[str, Any],
        *,
        delta: torch.Tensor | None = None,
        tuned_context: dict[str, str | float] | None = None,
        tuned_points: int = 0,
    ) -> None:
        self.net = net
        self.schema = schema
        self.metadata = metadata
        self.delta = delta
        self.tuned_context = tuned_context
        self.tuned_points = tuned_points
        self._h_cache: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ properties
    @property
    def job_types(self) -> list[str]:
        return sorted(self.schema.required)

    @property
    def properties(self) -> list[str]:
        return list(self.schema.properties)

    @property
    def _steep_floor(self) -> float:
        return float(self.metadata.get("min_scale_out", 1))

    @property
    def is_finetuned(self) -> bool:
        return self.tuned_context is not None

    # ------------------------------------------------------------------ training
    @classmethod
    def pretrain(
        cls,
        runs: pd.DataFrame,
        *,
        seed: int = 0,
        time_budget_s: float | None = None,
        config: TrainingConfig | None = None,
    ) -> RuntimeModel:
        """Pre-train a general model on runs of one or many job types across contexts."""
        cfg = config or TrainingConfig()
        if time_budget_s is not None:
            if not (isinstance(time_budget_s, (int, float)) and time_budget_s > 0):
                raise InvalidInputError("time_budget_s", time_budget_s, "must be a number of seconds > 0")
            cfg = TrainingConfig(**{**cfg.__dict__, "time_budget_s": float(time_budget_s)})
        with single_thread():
            return cls._pretrain(runs, seed=seed, cfg=cfg)

    @classmethod
    def _pretrain(cls, runs: pd.DataFrame, *, seed: int, cfg: TrainingConfig) -> RuntimeModel:
        started = time.monotonic()
        frame = _training_frame(runs, "runs")
        device = cfg.resolve_device()
        contexts = _frame_contexts(frame)
        keys = [_context_key(c) for c in contexts]
        schema = FeatureSchema.from_contexts(list(frame["job_type"]), contexts)
        data = encode_runs(
            schema, contexts, keys, frame["scale_out"].to_numpy(), frame["runtime_s"].to_numpy(), device
        )
        n_ctx = data.vectors.shape[0]
        rng = np.random.default_rng(seed)
        k_folds = min(cfg.members, n_ctx) if n_ctx >= 2 else 1
        folds = context_folds(n_ctx, k_folds, rng) if k_folds > 1 else [np.array([], dtype=np.int64)]
        # training gets 3/4 of a time budget, calibration what is left (it shrinks its search to fit)
        deadline = started + 0.75 * cfg.time_budget_s if cfg.time_budget_s else None
        net, member_stats = train_ensemble(data, folds, seed=seed, config=cfg, deadline=deadline)
        model = cls(net, schema, {})
        noise_sd = noise_sd_of(data)
        likelihood_sd = max(noise_sd, _training_rms(net, data, folds))
        cal_deadline = started + 0.95 * cfg.time_budget_s if cfg.time_budget_s else None
        calibration = model._calibrate(data, folds, likelihood_sd, rng, cal_deadline) if k_folds > 1 else {}
        newest = int(frame["id"].max()) if "id" in frame.columns and frame["id"].notna().any() else None
        model.metadata = {
            "format": FORMAT,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seed": seed,
            "job_types": sorted(set(frame["job_type"])),
            "n_runs": len(frame),
            "n_contexts": int(n_ctx),
            "min_scale_out": int(frame["scale_out"].min()),
            "newest_run_id": newest,
            "noise_sd": noise_sd,
            "likelihood_sd": likelihood_sd,  # replaced by the calibrated choice when there is one
            "train_seconds": round(time.monotonic() - started, 3),
            "members": member_stats,
            "config": {k: v for k, v in cfg.__dict__.items() if k != "device"},
            **calibration,
        }
        return model

    def _calibrate(
        self,
        data: EncodedRuns,
        folds: list[np.ndarray],
        likelihood_sd: float,
        rng: np.random.Generator,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Out-of-fold residuals after simulated fine-tuning with k = 0..MAX_K points.

        Also picks the fine-tuning prior width and likelihood width by out-of-fold error
        (empirical Bayes on the training data itself, never on the data evaluated later):
        the likelihood must cover the basis' structural misfit, not only run noise, or a
        few points on a smooth-looking job drag the curve into interpolating them.
        """
        h_oof: list[torch.Tensor] = []
        ctx_ids: list[int] = []
        with torch.no_grad():
            h_members, _ = self.net.log_weights(data.vectors, data.mask)  # [M, C, F]
            for m, fold in enumerate(folds):
                if m >= self.net.members or len(fold) == 0:
                    continue
                h_oof.append(h_members[m, torch.as_tensor(fold, device=h_members.device)])
                ctx_ids.extend(int(c) for c in fold)
        if not ctx_ids:
            return {}
        h_all = torch.cat(h_oof)
        ctx_index = data.ctx_index.cpu().numpy()
        run_ids = [np.flatnonzero(ctx_index == c) for c in ctx_ids]
        basis_np = data.basis.cpu().numpy()
        y_np = data.log_y.cpu().numpy()

        def residuals(k: int, cov: torch.Tensor, lik_sd: float, draws: int) -> tuple[np.ndarray, np.ndarray]:
            """Out-of-fold log residuals at the test runs, and the scale-outs they were at."""
            out: list[np.ndarray] = []
            at: list[np.ndarray] = []
            for _ in range(draws):
                picks, tests = [], []
                for runs in run_ids:
                    p, t = pick_points(data.scale_out[runs], k, rng)
                    picks.append(runs[p])
                    tests.append(runs[t])
                delta = torch.zeros_like(h_all)
                if k:
                    kmax = max(len(p) for p in picks)
                    b = np.zeros((len(picks), kmax, N_BASIS), dtype=np.float32)
                    yy = np.zeros((len(picks), kmax), dtype=np.float32)
                    w = np.zeros((len(picks), kmax), dtype=np.float32)
                    for i, p in enumerate(picks):
                        b[i, : len(p)], yy[i, : len(p)], w[i, : len(p)] = basis_np[p], y_np[p], 1.0
                    b[w == 0] = 1.0
                    delta = fit_delta_averaged(
                        h_all,
                        torch.as_tensor(b, device=h_all.device),
                        torch.as_tensor(yy, device=h_all.device),
                        torch.as_tensor(w, device=h_all.device),
                        noise_sd=lik_sd,
                        learned_cov=cov,
                    )
                hh = (h_all + delta).cpu()
                for i, t in enumerate(tests):
                    if len(t) == 0:
                        continue
                    pred = log_runtime(hh[i].expand(len(t), N_BASIS), torch.as_tensor(basis_np[t]))
                    out.append(y_np[t] - pred.numpy())
                    at.append(data.scale_out[t])
            if not out:
                return np.array([]), np.array([])
            return np.concatenate(out), np.concatenate(at)

        # Empirical Bayes prior: the corrections each out-of-fold context needs when all of
        # its runs are known, fitted under a weak prior.
        everything = []
        for runs in run_ids:
            everything.append(runs)
        kmax = max(len(r) for r in everything)
        b = np.ones((len(everything), kmax, N_BASIS), dtype=np.float32)
        yy = np.zeros((len(everything), kmax), dtype=np.float32)
        w = np.zeros((len(everything), kmax), dtype=np.float32)
        for i, r in enumerate(everything):
            b[i, : len(r)], yy[i, : len(r)], w[i, : len(r)] = basis_np[r], y_np[r], 1.0
        full = fit_delta(
            h_all.cpu(),
            torch.as_tensor(b),
            torch.as_tensor(yy),
            torch.as_tensor(w),
            noise_sd=likelihood_sd,
            prior_precision=torch.eye(N_BASIS),
        )
        cov = empirical_prior_covariance(full)
        scores: dict[tuple[float, float], float] = {}
        # the middle of the grid first: if the time budget ends the search early, it has the safest guess
        grid = sorted(
            ((p, f) for p in PRIOR_SCALES for f in LIKELIHOOD_FACTORS),
            key=lambda pf: (abs(np.log(pf[0])) + abs(np.log(pf[1] / 2.0)), pf),
        )
        for scale, factor in grid:
            if scores and deadline is not None and time.monotonic() > deadline:
                break
            lik = likelihood_sd * factor
            errs = [np.mean(np.abs(np.expm1(residuals(k, cov * scale**2, lik, 1)[0]))) for k in (1, 2, 3, 5)]
            scores[(scale, lik)] = float(np.mean(errs))
        prior_scale, lik_sd = min(scores, key=lambda p: (scores[p], p))
        prior_cov = cov * prior_scale**2
        tables: dict[str, dict[str, list[float]]] = {}
        mre = {}
        draws = 1 if deadline is not None and time.monotonic() > deadline else _CALIBRATION_DRAWS
        small_max = SMALLEST_SCALE_OUT_FACTOR * float(data.scale_out.min())
        for k in range(MAX_K + 1):
            r, at = residuals(k, prior_cov, lik_sd, draws)
            small = at <= small_max
            pooled = quantile_table(r)
            tables[str(k)] = {
                bucket: quantile_table(r[sel]) if sel.sum() >= MIN_BUCKET_RESIDUALS else pooled
                for bucket, sel in (("smallest", small), ("others", ~small))
            }
            mre[str(k)] = float(np.mean(np.abs(np.expm1(-r)))) if len(r) else math.nan
        return {
            "prior_scale": prior_scale,
            "prior_covariance": prior_cov.tolist(),
            "likelihood_sd": lik_sd,
            "prior_scores": {f"{p}/{lik:.4f}": v for (p, lik), v in scores.items()},
            "calibration": {"quantiles": tables, "n": len(ctx_ids), "smallest_max_scale_out": small_max},
            "validation_mre": mre,
        }

    # ------------------------------------------------------------------ fine-tuning
    def finetune(self, context_runs: pd.DataFrame) -> RuntimeModel:
        """A copy fine-tuned to the one context of ``context_runs`` (0 rows → the general model)."""
        if getattr(context_runs, "empty", False):
            return RuntimeModel(self.net, self.schema, self.metadata)
        with single_thread():
            return self._finetune(context_runs)

    def _finetune(self, context_runs: pd.DataFrame) -> RuntimeModel:
        frame = _training_frame(context_runs, "context_runs")
        contexts = _frame_contexts(frame)
        keys = {_context_key(c) for c in contexts}
        if len(keys) > 1:
            raise InvalidInputError(
                "context_runs", f"{len(keys)} contexts", "fine-tuning takes the runs of exactly one context"
            )
        ctx = contexts[0]
        self.schema.check_context(str(ctx["job_type"]), ctx)
        h0 = self._base_h(ctx)  # [M, N_BASIS]
        basis = torch.as_tensor(
            scale_out_basis(frame["scale_out"].to_numpy(), self._steep_floor), dtype=torch.float32
        )
        log_y = torch.as_tensor(np.log(frame["runtime_s"].to_numpy()), dtype=torch.float32)
        m = h0.shape[0]
        delta = fit_delta_averaged(
            h0,
            basis.unsqueeze(0).expand(m, -1, -1).to(h0.device),
            log_y.unsqueeze(0).expand(m, -1).to(h0.device),
            torch.ones(m, len(frame), device=h0.device),
            noise_sd=float(self.metadata.get("likelihood_sd", 0.05)),
            learned_cov=self._prior_covariance(),
        )
        tuned = RuntimeModel(
            self.net,
            self.schema,
            self.metadata,
            delta=delta.detach(),
            tuned_context=ctx,
            tuned_points=int(frame["scale_out"].nunique()),
        )
        return tuned

    def _prior_covariance(self) -> torch.Tensor:
        cov = self.metadata.get("prior_covariance")
        if cov is None:  # a single training context: no out-of-fold data to estimate it from
            return torch.eye(N_BASIS) * DEFAULT_PRIOR_SD**2
        return torch.as_tensor(cov, dtype=torch.float32)

    # ------------------------------------------------------------------ prediction
    def _normalise(self, context: Mapping[str, object]) -> dict[str, str | float]:
        if not isinstance(context, Mapping):
            raise InvalidInputError("context", context, "must be a mapping of property name to value")
        job = context.get("job_type")
        if job is None:
            if len(self.schema.required) != 1:
                raise InvalidInputError(
                    "context.job_type", None, f"this model covers several job types: {self.job_types}"
                )
            job = next(iter(self.schema.required))
        if not isinstance(job, str) or job not in self.schema.required:
            raise UnknownJobTypeError(str(job), self.job_types)
        ctx = context_of(job, {k: v for k, v in context.items() if k in self.schema.properties})
        if "framework" in self.schema.properties and "framework" not in ctx:
            fw = context.get("framework")
            if fw is not None:
                ctx["framework"] = str(fw).lower()
        self.schema.check_context(job, ctx)
        return ctx

    def _base_h(self, ctx: dict[str, str | float]) -> torch.Tensor:
        key = _context_key(ctx)
        cached = self._h_cache.get(key)
        if cached is None:
            vectors, mask = self.schema.encode([ctx])
            device = self.net.head.weight.device
            v, mk = torch.as_tensor(vectors, device=device), torch.as_tensor(mask, device=device)
            with torch.no_grad():
                cached = self.net.log_weights(v, mk)[0][:, 0, :]  # [M, N_BASIS]
            if len(self._h_cache) > 1024:
                self._h_cache.clear()
            self._h_cache[key] = cached
        return cached

    def _member_log_pred(self, context: Mapping[str, object], scale_outs: Sequence[int]) -> np.ndarray:
        ctx = self._normalise(context)
        ns = _scale_outs(scale_outs)
        with single_thread():
            return self._log_pred(ctx, ns)

    def _log_pred(self, ctx: dict[str, str | float], ns: np.ndarray) -> np.ndarray:
        h = self._base_h(ctx)
        if self.delta is not None and self.tuned_context is not None and ctx == self.tuned_context:
            h = h + self.delta
        basis = torch.as_tensor(scale_out_basis(ns, self._steep_floor), dtype=torch.float32, device=h.device)
        with torch.no_grad():
            logs = log_runtime(h.unsqueeze(1), basis.unsqueeze(0))  # [M, S]
        return logs.cpu().numpy().astype(np.float64)

    def predict(self, context: Mapping[str, object], scale_outs: Sequence[int]) -> np.ndarray:
        """Predicted runtime in seconds at each scale-out (geometric mean of the members)."""
        return np.exp(self._member_log_pred(context, scale_outs).mean(axis=0))

    def predict_band(
        self, context: Mapping[str, object], scale_outs: Sequence[int], confidence: float = 0.9
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lower, upper) seconds; P(runtime ≤ upper) ≈ confidence, P(runtime ≥ lower) ≈ confidence.

        Split-conformal: quantiles of out-of-fold log residuals measured after fine-tuning
        on as many points as this model was tuned on (up to MAX_K).
        """
        confidence = validate_confidence(confidence)
        ctx = self._normalise(context)
        logs = self._member_log_pred(context, scale_outs)
        mean = logs.mean(axis=0)
        points = self.tuned_points if self.tuned_context == ctx else 0
        lo_q, hi_q = self._residual_quantiles(min(points, MAX_K), confidence, _scale_outs(scale_outs))
        return np.exp(mean), np.exp(mean + lo_q), np.exp(mean + hi_q)

    def _residual_quantiles(
        self, k: int, confidence: float, scale_outs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper log-residual quantiles per scale-out."""
        cal = self.metadata.get("calibration") or {}
        tables = (cal.get("quantiles") or {}).get(str(k)) or {}
        if not tables:
            # No out-of-fold data (a single context): a Gaussian band from run noise and
            # the prior width, wider than any calibrated one on purpose.
            from statistics import NormalDist

            sd = math.hypot(float(self.metadata.get("noise_sd", 0.05)), 2 * DEFAULT_PRIOR_SD)
            z = NormalDist().inv_cdf(confidence)
            return np.full(len(scale_outs), -z * sd), np.full(len(scale_outs), z * sd)
        n = max(int(cal.get("n", 1)), 1)
        # finite-sample conformal correction: level ⌈(n+1)q⌉/n, clipped to the table's range
        level = min(1.0, math.ceil((n + 1) * confidence) / n)
        bounds = {
            bucket: (
                float(np.interp(1.0 - level, QUANTILE_GRID, t)),
                float(np.interp(level, QUANTILE_GRID, t)),
            )
            for bucket, t in tables.items()
        }
        small = scale_outs <= float(cal.get("smallest_max_scale_out", 0.0))
        lo = np.where(small, bounds["smallest"][0], bounds["others"][0])
        hi = np.where(small, bounds["smallest"][1], bounds["others"][1])
        return lo, hi

    # ------------------------------------------------------------------ persistence
    def to_bytes(self) -> bytes:
        from safetensors.torch import save

        tensors = {name: value.detach().cpu().contiguous() for name, value in self.net.state_dict().items()}
        if self.delta is not None:
            tensors["delta"] = self.delta.detach().cpu().contiguous()
        header = {
            "format": FORMAT,
            "n_members": self.net.members,
            "n_properties": self.net.n_properties,
            "code": self.net.code,
            "hidden": self.net.hidden,
            "schema": self.schema.to_dict(),
            "metadata": self.metadata,
            "tuned_context": self.tuned_context,
            "tuned_points": self.tuned_points,
        }
        return save(tensors, metadata={"bellamy": json.dumps(header, default=_json_default)})

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<bytes>") -> RuntimeModel:
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            header_len = int.from_bytes(data[:8], "little")
            raw_header = json.loads(data[8 : 8 + header_len])
            header = json.loads(raw_header["__metadata__"]["bellamy"])
            tensors = load(data)
        except (
            SafetensorError,
            ValueError,
            KeyError,
            TypeError,
            json.JSONDecodeError,
            UnicodeDecodeError,
        ) as exc:
            raise ModelFileError(
                f"{source}: not a readable Bellamy model file ({exc.__class__.__name__}: {exc})"
            ) from None
        if header.get("format") != FORMAT:
            raise ModelFileError(
                f"{source}: model format {header.get('format')!r} is not {FORMAT!r}; retrain with `bellamy train`"
            )
        try:
            net = BellamyNet(
                int(header["n_properties"]),
                members=int(header["n_members"]),
                code=int(header["code"]),
                hidden=int(header["hidden"]),
            )
            net.load_state_dict({k: v for k, v in tensors.items() if k != "delta"})
            net.eval()
            schema = FeatureSchema.from_dict(header["schema"])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise ModelFileError(f"{source}: model file is inconsistent ({exc})") from None
        return cls(
            net,
            schema,
            header["metadata"],
            delta=tensors.get("delta"),
            tuned_context=header.get("tuned_context"),
            tuned_points=int(header.get("tuned_points", 0)),
        )

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(p)  # atomic: a reader never sees half a file
        return p

    @classmethod
    def load(cls, path: str | Path) -> RuntimeModel:
        p = Path(path)
        if not p.is_file():
            raise ModelFileError(f"{p}: no such model file")
        return cls.from_bytes(p.read_bytes(), source=str(p))


def _training_rms(net: BellamyNet, data: EncodedRuns, folds: list[np.ndarray]) -> float:
    """RMS log error of the members on their own training runs: the basis' misfit plus noise."""
    with torch.no_grad():
        h, _ = net.log_weights(data.vectors, data.mask)
        err = log_runtime(h[:, data.ctx_index], data.basis.unsqueeze(0)) - data.log_y  # [M, N]
    ctx = data.ctx_index.cpu().numpy()
    sq = []
    for m in range(net.members):
        held = folds[m % len(folds)]
        train = ~np.isin(ctx, held)
        sq.append(float((err[m].cpu().numpy()[train] ** 2).mean()))
    return float(np.sqrt(np.mean(sq)))


def _json_default(value: object) -> object:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
