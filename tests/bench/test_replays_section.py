"""bench/replays.py rewrites only its own section of docs/results.md."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load


def _runner():
    return load("replays")


def test_section_is_replaced_between_its_markers_and_the_rest_is_kept(tmp_path: Path) -> None:
    runner = _runner()
    doc = tmp_path / "results.md"
    doc.write_text(
        "# Results\n\n<!-- fgd:begin -->\nFGD table\n<!-- fgd:end -->\n\n"
        f"{runner.BEGIN}\nold replays\n{runner.END}\n\ntrailer\n"
    )
    runner.write_section("new replays", doc)
    text = doc.read_text()
    assert "old replays" not in text and f"{runner.BEGIN}\nnew replays\n{runner.END}" in text
    assert text.startswith("# Results\n\n<!-- fgd:begin -->\nFGD table\n<!-- fgd:end -->\n\n")
    assert text.endswith("\n\ntrailer\n")


def test_section_is_appended_when_the_file_has_none(tmp_path: Path) -> None:
    runner = _runner()
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nsomething else\n")
    runner.write_section("replays", doc)
    assert doc.read_text() == f"# Results\n\nsomething else\n\n{runner.BEGIN}\nreplays\n{runner.END}\n"
