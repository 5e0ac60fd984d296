"""Retention: `bellamy models prune` and `bellamy decisions prune`, on SQLite and PostgreSQL.

What each deletes and what it keeps (docs/architecture.md, "A store of a million runs").
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.cli._args import parse_duration
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import (
    Decision,
    ModelRepository,
    ModelVersion,
    Run,
    Store,
)

from .conftest import add_decision, observed_run


def _version(store: Store, job_type: str, *, active: bool = True, **kwargs: Any) -> int:
    """A stored model version (general unless a context_fingerprint is given); returns its id."""
    scope = "context" if "context_fingerprint" in kwargs else "general"
    kwargs.setdefault("weights", b"c" + str(kwargs.get("context_fingerprint")).encode())
    return store.write(
        lambda s: (
            ModelRepository(s)
            .add(
                job_type=job_type,
                scope=scope,
                status="active" if active else "candidate",
                blob_writer=store.write_blob,
                blob_threshold_bytes=store.blob_threshold_bytes,
                **kwargs,
            )
            .id
        )
    )


def _general(store: Store, job_type: str, *, active: bool = False, weights: bytes = b"g") -> int:
    return _version(store, job_type, active=active, weights=weights)


def _copy(store: Store, job_type: str, parent: int, fingerprint: str) -> int:
    return _version(store, job_type, context_fingerprint=fingerprint, parent_id=parent)


def _decision(store: Store, model_id: int | None, *, age: dt.timedelta = dt.timedelta(0)) -> int:
    return add_decision(store, age=age, model_version="grep/v1", model_version_id=model_id)


def _ids(store: Store) -> set[int]:
    with store.read() as s:
        assert s is not None
        return set(s.scalars(sa.select(ModelVersion.id)))


def test_models_prune_keeps_active_versions_the_copies_in_use_and_rollback_targets(
    store: Store, bellamy: Bellamy
) -> None:
    old = [_general(store, "grep", active=True) for _ in range(4)]  # each retires the one before
    active = _general(store, "grep", active=True)
    stale_copy = _copy(store, "grep", old[-1], "a" * 32)  # a copy of a general version since retired
    in_use = _copy(store, "grep", active, "b" * 32)
    retired_copy = _copy(store, "grep", active, "c" * 32)
    in_use_c = _copy(store, "grep", active, "c" * 32)  # retires retired_copy
    candidate = _general(store, "grep")
    other_active = _general(store, "sort", active=True)
    other_copy = _copy(store, "sort", other_active, "d" * 32)
    decision = _decision(store, old[0])

    with store.read() as s:
        assert s is not None
        assert s.get(ModelVersion, retired_copy).status == "retired"

    done = bellamy.prune_models(keep=2)
    kept = _ids(store)
    # the active versions, the copies of them that contexts use, and the 2 newest others of grep
    assert kept == {active, in_use, in_use_c, candidate, old[-1], other_active, other_copy}
    assert done["general"] == 3 and done["context"] == 2
    # the decision that named a deleted version keeps its label, loses the id link
    with store.read() as s:
        assert s is not None
        row = s.get(Decision, decision)
        assert row.model_version_id is None and row.model_version == "grep/v1"
    # nothing more to delete: a second prune is a no-op
    assert bellamy.prune_models(keep=2)["deleted"] == []
    # the models still serve: rollback goes back to a kept version
    assert bellamy.rollback("grep")["id"] == old[-1]
    assert stale_copy not in kept


def test_models_prune_keep_zero_and_one_job_type(store: Store, bellamy: Bellamy) -> None:
    g1 = _general(store, "grep", active=True)
    g2 = _general(store, "grep", active=True)
    s1 = _general(store, "sort", active=True)
    s2 = _general(store, "sort", active=True)
    bellamy.prune_models(keep=0, job_type="sort")
    assert _ids(store) == {g1, g2, s2}
    with pytest.raises(InvalidInputError, match="keep"):
        bellamy.prune_models(keep=-1)
    assert s1 not in _ids(store)


def test_models_prune_removes_weight_files_no_version_uses(tmp_path: Path) -> None:
    b = Bellamy(f"sqlite:///{tmp_path / 'b.db'}", blob_threshold_bytes=1)
    b.upgrade()
    ids = [_general(b.store, "grep", active=True, weights=w) for w in (b"old", b"shared", b"shared")]
    with b.store.read() as s:
        assert s is not None
        paths = [Path(s.get(ModelVersion, i).weights_path) for i in ids]
    assert paths[1] == paths[2] and all(p.exists() for p in paths)
    done = b.prune_models(keep=0)
    assert done["general"] == 2 and done["files"] == 1
    # the old version's file went; the file the active version shares with a deleted one stayed
    assert not paths[0].exists() and paths[2].exists()
    with b.store.read() as s:
        assert s is not None
        assert ModelRepository(s).weights(s.get(ModelVersion, ids[2])) == b"shared"


def test_decisions_prune_deletes_old_ones_and_unlinks_their_runs(store: Store, bellamy: Bellamy) -> None:
    old_linked = _decision(store, None, age=dt.timedelta(days=100))
    old_unlinked = _decision(store, None, age=dt.timedelta(days=100))
    recent = _decision(store, None, age=dt.timedelta(days=1))
    run_id = bellamy.record_run(**observed_run(decision_id=old_linked))
    with store.read() as s:
        assert s is not None
        assert s.get(Decision, old_linked).run_row_id == run_id

    assert bellamy.prune_decisions(dt.timedelta(days=90), keep_linked=True) == 1
    assert {d["id"] for d in bellamy.list_decisions()} == {old_linked, recent}
    assert bellamy.prune_decisions(dt.timedelta(days=90)) == 1
    assert {d["id"] for d in bellamy.list_decisions()} == {recent}
    # the run stays, and no longer points at a deleted decision
    with store.read() as s:
        assert s is not None
        run = s.get(Run, run_id)
        assert run is not None and run.decision_id is None
    assert old_unlinked not in {d["id"] for d in bellamy.list_decisions()}
    for bad in (0, -5, float("nan"), "soon", "1h30", True):
        with pytest.raises(InvalidInputError, match="older_than"):
            bellamy.prune_decisions(bad)  # type: ignore[arg-type]
    # text as the CLI and a templated retention task give it: only the recent one is younger
    assert bellamy.prune_decisions("2h") == 1
    assert bellamy.list_decisions() == []


def test_prune_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    b = Bellamy(url)
    b.upgrade()
    _decision(b.store, None, age=dt.timedelta(days=10))
    _decision(b.store, None)
    assert main(["--store-url", url, "decisions", "prune", "--older-than", "1w"]) == 0
    assert "deleted 1 decision(s)" in capsys.readouterr().out
    for bad in ("soon", "0d", "", "5x", "-3d"):
        assert main(["--store-url", url, "decisions", "prune", f"--older-than={bad}"]) == 2
        assert "--older-than" in capsys.readouterr().err
    assert len(b.list_decisions()) == 1
    _general(b.store, "grep", active=True)
    _general(b.store, "grep", active=True)
    assert main(["--store-url", url, "models", "prune", "--keep", "0"]) == 0
    assert "deleted 1 general version(s)" in capsys.readouterr().out
    assert main(["--store-url", url, "models", "prune", "--keep", "-1"]) == 2
    assert "--keep" in capsys.readouterr().err
    # a store that does not exist yet: nothing to prune, and nothing created
    missing = tmp_path / "none.db"
    assert main(["--store-url", f"sqlite:///{missing}", "models", "prune"]) == 0
    assert main(["--store-url", f"sqlite:///{missing}", "decisions", "prune", "--older-than", "1d"]) == 0
    assert not missing.exists()


def test_parse_duration() -> None:
    assert parse_duration("90d", "x") == dt.timedelta(days=90)
    assert parse_duration("1d12h", "x") == dt.timedelta(days=1, hours=12)
    assert parse_duration(" 2w ", "x") == dt.timedelta(weeks=2)
    assert parse_duration("1.5h", "x") == dt.timedelta(minutes=90)
