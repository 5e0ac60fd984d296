"""The models this process has loaded from its stores, so that a launch does not read and parse
them again: general and fine-tuned versions, Ernest fits and versions found unreadable, keyed
by what identifies them in their store. Importing this module imports no model code."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError
from airflow_provider_bellamy.records import validate_int
from airflow_provider_bellamy.store import ModelRepository

if TYPE_CHECKING:
    from airflow_provider_bellamy.store import ModelVersion, Store

_MODEL_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_MODEL_CACHE_SIZE = 32
_CACHE_LOCK = threading.Lock()


def cache_get(key: tuple[Any, ...]) -> Any:
    with _CACHE_LOCK:
        model = _MODEL_CACHE.get(key)
        if model is not None:
            _MODEL_CACHE.move_to_end(key)
        return model


def cache_put(key: tuple[Any, ...], model: Any) -> None:
    with _CACHE_LOCK:
        _MODEL_CACHE[key] = model
        _MODEL_CACHE.move_to_end(key)
        while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
            _MODEL_CACHE.popitem(last=False)


def clear_model_cache() -> None:
    """Forget the models loaded in this process (the next call reads them from the store)."""
    with _CACHE_LOCK:
        _MODEL_CACHE.clear()


def version_key(store: Store, mv: ModelVersion) -> tuple[Any, ...]:
    return (store.cache_key, mv.id, mv.weights_sha256)


def load_version(store: Store, mv: ModelVersion, repo: ModelRepository | None = None) -> Any:
    """The model of a stored version, from this process's cache or deserialised once; ``repo``:
    the caller's open session's, else a read of its own."""
    key = version_key(store, mv)
    cached = cache_get(key)
    if isinstance(cached, ModelFileError):
        raise cached  # found unreadable before: do not read and parse it on every call
    if cached is not None:
        return cached
    from airflow_provider_bellamy.model import RuntimeModel

    try:
        if repo is None:
            with store.read("loading a model") as session:
                data = ModelRepository(session).weights(mv)
        else:
            data = repo.weights(mv)
        model = RuntimeModel.from_bytes(data, source=f"model version {mv.id} ({mv.label})")
    except ModelFileError as exc:
        cache_put(key, exc)
        raise
    cache_put(key, model)
    return model


def load_stored(store: Store, version_id: Any = None, *, job_type: str | None = None) -> Any:
    """A stored model by version id, or the active general model of ``job_type``."""
    with store.read("loading a model") as session:
        repo = ModelRepository(session)
        if version_id is not None:
            mv = repo.get(validate_int(version_id, "version_id"))
            if mv is None:
                raise InvalidInputError("version_id", version_id, "no such model version")
        elif job_type is None:
            raise InvalidInputError("job_type", None, "give a job type or a version id")
        else:
            mv = repo.active(job_type)
            if mv is None:
                raise InvalidInputError("job_type", job_type, "has no active model; run `bellamy train`")
        return load_version(store, mv, repo)
