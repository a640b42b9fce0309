"""ARCHITECTURE.md's "To add X, touch these files" list stays true: every file it names exists and mentions the
symbol named beside it, and the list covers the four kinds of change it promises."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIR = re.compile(r"`([\w./-]+\.(?:py|yaml|md))` \(`(\w+)`\)")


def _section() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index("## To add X, touch these files")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_to_add_list_covers_a_family_a_dataset_a_column_and_a_result_kind():
    section = _section()
    for kind in ("A backbone family", "A pretraining dataset format", "A report column", "A result kind"):
        assert f"**{kind}**" in section, kind


def test_every_file_the_to_add_list_names_exists_and_mentions_its_symbol():
    pairs = PAIR.findall(re.sub(r"\s+", " ", _section()))
    assert len(pairs) >= 10, pairs
    for path, symbol in pairs:
        file = ROOT / path
        assert file.is_file(), f"ARCHITECTURE.md names {path}, which does not exist"
        assert re.search(rf"\b{symbol}\b", file.read_text(encoding="utf-8")), f"{path} does not mention {symbol}"
