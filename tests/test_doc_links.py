"""The docs' relative links resolve: each file exists and each #anchor is a heading there (GitHub's rules)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_doc_links", ROOT / "scripts" / "check_doc_links.py")
check_doc_links = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_doc_links)


def test_anchors_follow_githubs_rules():
    # headings of this repository's docs whose anchors other files link to
    assert check_doc_links.slug("Speed (`bellamy benchmark speed`, 2 cores, nothing else running)") == (
        "speed-bellamy-benchmark-speed-2-cores-nothing-else-running"
    )
    assert check_doc_links.slug("Before its first run (k = 0): the nearest training curves") == (
        "before-its-first-run-k--0-the-nearest-training-curves"
    )
    assert check_doc_links.slug("Property values: one place (`records.conform_context`)") == (
        "property-values-one-place-recordsconform_context"
    )
    assert check_doc_links.anchors_of("## Log\n\n### Log\n\n```\n# not a heading\n```\n## Log") == [
        "log",
        "log-1",
        "log-2",
    ]


def test_a_link_to_a_heading_that_is_not_there_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("[model](docs/model.md#uncertainty) [gone](docs/gone.md)\n")
    (tmp_path / "docs" / "model.md").write_text("# Model\n\n## Fine-tuning\n\n[self](#fine-tuning)\n")
    broken = check_doc_links.check(tmp_path)
    assert broken == [
        "README.md:1: docs/model.md#uncertainty (no such heading)",
        "README.md:1: docs/gone.md (no such file)",
    ]


def test_every_link_in_the_docs_resolves():
    assert check_doc_links.check(ROOT) == []
