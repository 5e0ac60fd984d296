"""Model versions: numbering, exactly one active version, atomic promote and rollback, big weights."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import ModelRepository, ModelVersion, Store


def _add(store: Store, job_type: str = "grep", n: int = 1, **kwargs: object) -> list[int]:
    def work(session: object) -> list[int]:
        repo = ModelRepository(session)  # type: ignore[arg-type]
        return [
            repo.add(job_type=job_type, scope="general", weights=f"w{job_type}{i}".encode(), **kwargs).id  # type: ignore[arg-type]
            for i in range(n)
        ]

    return store.write(work)


def _active(store: Store, job_type: str = "grep") -> list[int]:
    with store.read() as session:
        assert session is not None
        return [m.id for m in ModelRepository(session).list(job_type=job_type, status="active")]


def test_versions_are_numbered_per_lineage(store: Store, bellamy: Bellamy) -> None:
    _add(store, "grep", 3)
    _add(store, "sort", 1)
    store.write(
        lambda s: ModelRepository(s).add(
            job_type="grep", scope="context", context_fingerprint="abc", weights=b"x"
        )
    )
    by_label = {m["label"]: m for m in bellamy.list_models(scope=None)}
    assert set(by_label) == {"grep/v1", "grep/v2", "grep/v3", "sort/v1", "grep/ctx-abc/v1"}
    assert all(m["status"] == "candidate" for m in by_label.values())
    assert [m["label"] for m in bellamy.list_models("grep")] == ["grep/v3", "grep/v2", "grep/v1"]


def test_promote_keeps_exactly_one_active_and_rollback_steps_back(store: Store, bellamy: Bellamy) -> None:
    v1, v2, v3 = _add(store, "grep", 3)
    (other,) = _add(store, "sort", 1)
    bellamy.promote(other)
    for v in (v1, v2, v3):
        assert bellamy.promote(v)["status"] == "active"
        assert _active(store) == [v]
    assert _active(store, "sort") == [other]  # other job types untouched
    assert bellamy.promote(v3)["id"] == v3  # promoting the active one is a no-op

    assert bellamy.rollback("grep")["id"] == v2
    assert _active(store) == [v2]
    assert bellamy.rollback("grep")["id"] == v1  # steps further back, does not toggle
    with pytest.raises(InvalidInputError, match="no version was active before grep/v1"):
        bellamy.rollback("grep")
    assert _active(store) == [v1]
    statuses = {m["id"]: m["status"] for m in bellamy.list_models("grep")}
    assert statuses == {v1: "active", v2: "retired", v3: "retired"}

    with pytest.raises(InvalidInputError, match="version_id=9999"):
        bellamy.promote(9999)
    with pytest.raises(InvalidInputError, match="job_type='kmeans'"):
        bellamy.rollback("kmeans")
    assert _active(store) == [v1]


def test_the_database_refuses_two_active_versions(store: Store) -> None:
    v1, v2 = _add(store, "grep", 2)
    store.write(lambda s: ModelRepository(s).promote(v1))

    def force_second_active(session: object) -> None:
        session.execute(sa.update(ModelVersion).where(ModelVersion.id == v2).values(status="active"))  # type: ignore[attr-defined]

    with pytest.raises(IntegrityError):
        store.write(force_second_active)
    assert _active(store) == [v1]


def test_failed_promotion_changes_nothing(store: Store) -> None:
    v1, v2 = _add(store, "grep", 2)
    store.write(lambda s: ModelRepository(s).promote(v1))

    def promote_then_fail(session: object) -> None:
        ModelRepository(session).promote(v2)  # type: ignore[arg-type]
        raise RuntimeError("crash after the promotion, before the commit")

    with pytest.raises(RuntimeError):
        store.write(promote_then_fail)
    assert _active(store) == [v1]


def test_concurrent_promotions_leave_one_active(store_url: str, store: Store) -> None:
    ids = _add(store, "grep", 6)
    errors: list[BaseException] = []

    def promoter(version_id: int) -> None:
        try:
            b = Bellamy(store_url)
            for _ in range(5):
                b.promote(version_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=promoter, args=(v,)) for v in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert len(_active(store)) == 1


def test_big_weights_go_to_a_checked_file(store_url: str, store: Store, tmp_path: Path) -> None:
    small = Store(store_url, blob_dir=tmp_path / "blobs", blob_threshold_bytes=1000)
    big = bytes(range(256)) * 20

    def add(session: object, data: bytes) -> ModelVersion:
        return ModelRepository(session).add(  # type: ignore[arg-type]
            job_type="grep",
            scope="general",
            weights=data,
            blob_writer=small.write_blob,
            blob_threshold_bytes=small.blob_threshold_bytes,
        )

    in_file = small.write(lambda s: add(s, big))
    in_row = small.write(lambda s: add(s, b"small"))
    assert in_file.weights_path is not None and Path(in_file.weights_path).parent == tmp_path / "blobs"
    assert in_row.weights_path is None
    with small.read() as session:
        repo = ModelRepository(session)  # type: ignore[arg-type]
        assert repo.weights(repo.get(in_file.id)) == big  # type: ignore[arg-type]
        assert repo.weights(repo.get(in_row.id)) == b"small"  # type: ignore[arg-type]
    Path(in_file.weights_path).write_bytes(big[:-1] + b"\x00")
    with small.read() as session, pytest.raises(ModelFileError, match="checksum"):
        ModelRepository(session).weights(ModelRepository(session).get(in_file.id))  # type: ignore[arg-type]


def test_bad_model_versions_are_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError, match="context_fingerprint"):
        store.write(lambda s: ModelRepository(s).add(job_type="grep", scope="context", weights=b"x"))
    with pytest.raises(InvalidInputError, match="scope='local'"):
        store.write(lambda s: ModelRepository(s).add(job_type="grep", scope="local", weights=b"x"))
    with pytest.raises(InvalidInputError, match="weights"):
        store.write(lambda s: ModelRepository(s).add(job_type="grep", scope="general", weights=b""))
