"""The example word count's corpus: written once per argument set, never left half-written."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import pytest

from tests.flink.conftest import WORDCOUNT


@pytest.fixture
def wordcount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = importlib.util.spec_from_file_location("flink_wordcount", WORDCOUNT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_with_the_same_arguments_share_one_corpus(wordcount, tmp_path: Path) -> None:
    first, size = wordcount.shared_corpus(1000, 5, 3, 7)
    second, again = wordcount.shared_corpus(1000, 5, 3, 7)
    other, _ = wordcount.shared_corpus(1000, 5, 3, 8)

    assert first == second and size == again and other != first
    # only the two corpora: no staging directory is left behind
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(first), os.path.basename(other)])
    expected = tmp_path / "expected"
    assert wordcount.generate_corpus(str(expected), 1000, 5, 3, 7) == size
    for name in os.listdir(expected):
        assert (Path(first) / name).read_bytes() == (expected / name).read_bytes()


def test_a_corpus_put_in_place_by_another_run_wins(wordcount, tmp_path: Path, monkeypatch) -> None:
    real_rename = os.rename

    def raced(src: str, dst: str) -> None:
        # another run renames its copy into place between our check and our rename
        wordcount.generate_corpus(dst, 1000, 5, 3, 7)
        real_rename(src, dst)

    monkeypatch.setattr(wordcount.os, "rename", raced)
    target, size = wordcount.shared_corpus(1000, 5, 3, 7)
    assert os.listdir(tmp_path) == [os.path.basename(target)] and size > 0
