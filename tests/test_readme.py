"""The README stays a front door: short, every path, link, make target and tool it names exists, no placeholder left.

The same path and link checks run over the documents the README sends readers to first (RESULTS.md, docs/*.md),
so a renamed file or target fails here instead of going stale in the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 120
# Documents whose links and repository paths are checked (paths relative to the repository root).
DOCS = ("README.md", "RESULTS.md", "docs/SLURM.md", "docs/BAD_INPUT.md")

# A markdown link or image: [text](target) / ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A repository path written in the text or a code block: it starts with one of the project's top-level folders.
REPO_PATH = re.compile(
    r"(?<![\w./$-])((?:backbones|classification|detection|configs|tools|tests|docs)/[\w./{},*-]*[\w/*}])")
# A top-level document named on its own (ARCHITECTURE.md), not as the tail of a longer path.
TOP_DOC = re.compile(r"(?<![\w./-])([A-Z][A-Z_]*\.md)\b")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
MAKE = re.compile(r"(?:^|[\s;(])make ([a-z][\w-]*)", re.M)
TOOL = re.compile(r"(?<![\w/])tools/[\w-]+\.py\b")
MAKE_TARGET = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)", re.M)


def _read(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def _expand_braces(pattern: str) -> list[str]:
    """Shell brace expansion of the first {a,b} group, recursively: configs/{COCO,VOC}/x -> two patterns."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",")
            for p in _expand_braces(pattern[:m.start()] + alt + pattern[m.end():])]


def _missing(path: str, base: Path = ROOT) -> list[str]:
    """The expansions of `path` (braces, * globs) that name nothing under `base`."""
    out = []
    for p in _expand_braces(path):
        found = any(base.glob(p)) if "*" in p else (base / p).exists()
        if not found:
            out.append(p)
    return out


def _code(text: str) -> str:
    """Inline code spans and fenced blocks: where commands are written."""
    return "\n".join([*INLINE_CODE.findall(text), *FENCE.findall(text)])


def test_readme_is_at_most_120_lines():
    n = len(_read("README.md").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines, at most {MAX_LINES}: move detail into the linked documents"


def test_readme_has_no_placeholder_left():
    left = [f"{i}: {line}" for i, line in enumerate(_read("README.md").splitlines(), 1) if "@@" in line]
    assert not left, "README.md still holds placeholders (replace them with measured figures):\n" + "\n".join(left)


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_exist(doc):
    text, base = _read(doc), (ROOT / doc).parent
    targets = [t.split("#", 1)[0] for t in LINK.findall(text)]
    targets = [t for t in targets if t and not re.match(r"[a-z][a-z+.-]*:", t)]  # drop http:, mailto:, anchors
    missing = [t for t in targets if _missing(t, base)]
    assert not missing, f"{doc} links to files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_named_repository_paths_exist(doc):
    text = _read(doc)
    named = sorted(set(REPO_PATH.findall(text)))
    missing = {p: m for p in named if (m := _missing(p.rstrip(".")))}
    docs = sorted(set(TOP_DOC.findall(text)))
    missing.update({d: [d] for d in docs if not (ROOT / d).exists()})
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_readme_make_targets_exist():
    targets = set(MAKE_TARGET.findall((ROOT / "Makefile").read_text(encoding="utf-8")))
    named = set(MAKE.findall(_code(_read("README.md"))))
    assert named, "README.md names no make target: the test's pattern no longer matches its commands"
    assert named <= targets, f"README.md names make targets the Makefile lacks: {sorted(named - targets)}"


def test_readme_tools_exist():
    named = set(TOOL.findall(_read("README.md")))
    assert named, "README.md names no tool: the test's pattern no longer matches its commands"
    missing = sorted(t for t in named if not (ROOT / t).is_file())
    assert not missing, f"README.md names tools that do not exist: {missing}"


def test_the_readme_leads_with_the_headline_jobs_generated_result_and_agrees_with_its_files():
    """The first result a reader sees is the headline job's call, generated from its committed results file by
    tools/results_doc.py (as RESULTS.md's blocks are), and so is the demo's table: the README never disagrees with
    the files it cites."""
    from detection.main_job.results_doc import BLOCK, stale_blocks

    text = README.read_text(encoding="utf-8")
    kinds = [m["kind"] for m in BLOCK.finditer(text)]
    assert kinds and kinds[0] == "headline", kinds
    assert text.index("<!-- headline:") < text.index("## Start here")  # under the opening paragraph
    assert stale_blocks(README) == []


def test_the_demo_time_is_one_measured_figure_generated_with_its_machine():
    """`make demo`'s time is stated once: the README's demo block, generated from the job's results file (its
    minutes, machine and day) beside its panel; the Makefile, the CLI's help and the README's commands point to it
    instead of carrying a figure of their own that could go stale."""
    from detection.main_job.options import build_parser

    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- demo: (\S+) -->\n(.*?)<!-- end demo -->", text, re.S)
    assert len(blocks) == 1, "README.md has no `make demo` block (<!-- demo: results/<job>.json -->)"
    assert re.search(r"`make demo` took \d+\.\d min .* on .+, \d{4}-\d\d-\d\d\.", blocks[0][1])
    outside = text.replace(blocks[0][1], "")
    minutes = re.compile(r"\d+(?:[.-]\d+)? ?min")
    assert not [ln for ln in outside.splitlines() if re.search(r"make demo\b(?!-)", ln) and minutes.search(ln)]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert not minutes.search(makefile.split("demo:", 1)[1].split(";", 1)[0])
    preset_help = next(a.help for a in build_parser()._actions if "--preset" in a.option_strings)
    assert not minutes.search(preset_help.split("; headline", 1)[0])


def test_results_md_holds_the_current_results_in_at_most_20k_characters_and_links_the_history_once():
    """RESULTS.md is the current results, not a lab notebook: earlier designs go to docs/history/, whose index it
    links once."""
    text = _read("RESULTS.md")
    assert len(text) <= 20_000, f"RESULTS.md has {len(text)} characters: move earlier runs to docs/history/"
    assert text.count("](docs/history/README.md)") == 1 and (ROOT / "docs" / "history" / "README.md").is_file()


# A word that says one arm is better than another: written only by the statistic, in a generated block (#79).
COMPARISON_WORD = re.compile(r"\b(ahead|behind|leads?|lowered|raised|no worse|no better|equal(?:ly|s)?|"
                             r"outperform\w*|beats?|exceed\w*|improve[sd]?|"
                             r"(?:higher|lower|better|worse|more|less|fewer) (?:\w+ ){0,3}than)\b", re.I)


def comparison_words_outside_calls(text: str) -> list[str]:
    """Each line of `text` that, with the generated blocks (results_doc.BLOCK: the statistic's own sentences)
    taken out, holds a comparison word."""
    from detection.main_job.results_doc import BLOCK

    prose = BLOCK.sub("", text)
    return [line for line in prose.splitlines() if COMPARISON_WORD.search(line)]


@pytest.mark.parametrize("doc", ["README.md", "RESULTS.md"])
def test_every_comparison_in_the_results_documents_is_a_generated_call(doc):
    """RESULTS.md and the README say which arm is ahead only in the blocks the statistic writes; a sentence typed
    beside them would restate a call that can go stale, or make one the statistic never made."""
    assert comparison_words_outside_calls(_read(doc)) == []


def test_the_comparison_sentence_check_finds_a_call_typed_by_hand():
    generated = ("<!-- results: results/x.json -->\n- backbones: a is ahead of b by 3.0 AP [1.0, 5.0]\n"
                 "<!-- end results -->\n")
    assert comparison_words_outside_calls(generated) == []
    for typed in ("VGG-16(BN) is ahead in transfer by 10.6 AP.", "Half the pretraining transferred no worse.",
                  "The zero-init residual lowered its AP.",
                  "plain-56 ends with a higher training error than plain-20."):
        assert comparison_words_outside_calls(generated + typed + "\n") == [typed]
