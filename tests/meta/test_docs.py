"""The docs stay true: every link, path, make target, CLI verb, config file and job count
that README.md, config/README.md, docs/*.md and benchmarks/*.md (the index and a page per
benchmark) show must exist or match a dry run.

What counts as a claim (so a writer knows what is checked):
* a relative Markdown link ``[text](path#anchor)``: the file exists, and a Markdown
  file has a heading with that GitHub-style anchor;
* a repository path in backticks or a code block that starts with one of ROOTS
  (``config/...``, ``src/...``, ...): it exists (globs must match something), unless it
  is listed in OUTPUTS (files a command writes);
* ``make <target>``: a Makefile target; ``oodcorr <verb>``: a verb of the CLI's parser;
  ``--configfile``, ``--workflow-profile`` and ``--profile`` values under config/ or
  profiles/: they exist;
* a job count written as "`config/X.yaml` plans N jobs": equals the total of
  ``snakemake -n --quiet rules`` for that config (slow; the configs in DRY_RUN_CONFIGS, and
  config/paper.yaml in the paper grid's dry run of test_plan_layer.py, since each dry run costs
  seconds to a minute).

And each page under docs/ is at most 500 lines (issue 55): a longer one is split by concept.
"""

import functools
import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import REPO

SNAKEMAKE = str(REPO / ".venv/bin/snakemake")
DOCS = sorted(
    ["README.md", "config/README.md"]
    + [str(p.relative_to(REPO)) for folder in ("docs", "benchmarks") for p in (REPO / folder).glob("*.md")]
)
ROOTS = ("config", "src", "workflow", "tests", "benchmarks", "profiles", "resources", "envs")
# Paths the docs show that a command writes, not files of the repository.
OUTPUTS = {
    "config/paper.lock.yaml",  # written by `oodcorr prefetch`
}
# The job counts the docs may state; each one costs a dry run. config/paper.yaml's count is checked
# by the budget's count of its plan (tests/meta/test_plan_layer.py), not by a dry run of 16,128 jobs.
DRY_RUN_CONFIGS = ("config/config.yaml",)
CHECKED_ELSEWHERE = ("config/paper.yaml",)
JOB_COUNT = re.compile(r"`(config/[\w.-]+\.yaml)` plans ([\d,]+) jobs")


def read(doc: str) -> str:
    return (REPO / doc).read_text(encoding="utf-8")


def prose(text: str) -> str:
    """The text outside fenced code blocks (links and headings live there)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def code(text: str) -> list[str]:
    """What the docs show as code: inline `spans` and the lines of fenced blocks."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    rest = prose(text)
    return re.findall(r"`([^`\n]+)`", rest) + [line for b in blocks for line in b.splitlines()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - and _),
    spaces to hyphens, inline markup (backticks, emphasis asterisks) removed."""
    h = re.sub(r"[`*]", "", heading.strip()).lower()
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def links(doc: str) -> list[tuple[str, str]]:
    """(target file relative to the repository, anchor or '') of every relative link."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(read(doc))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (REPO / doc).parent / path if path else REPO / doc
        out.append((os.path.relpath(file, REPO), anchor))
    return out


def broken_links(doc: str) -> list[str]:
    bad = []
    for file, anchor in links(doc):
        path = REPO / file
        if not path.exists():
            bad.append(f"{file}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            bad.append(f"{file}#{anchor}: no such heading")
    return bad


def shown_paths(doc: str) -> set[str]:
    """Repository paths in code, as written (trailing punctuation and :line dropped)."""
    roots = "|".join(ROOTS)
    out = set()
    for snippet in code(read(doc)):
        for m in re.finditer(rf"(?<![\w./<-])((?:{roots})/[^\s`'\"),;]*)", snippet):
            p = re.sub(r"(:\d+)?[.:]*$", "", m.group(1))
            if "<" in p or "…" in p or "{" in p:  # a placeholder, not a path
                continue
            out.add(p)
    return out


def missing_paths(doc: str) -> list[str]:
    bad = []
    for p in sorted(shown_paths(doc) - OUTPUTS):
        if any(c in p for c in "*?["):
            if not list(REPO.glob(p)):
                bad.append(f"{p}: matches nothing")
        elif not (REPO / p).exists():
            bad.append(f"{p}: no such file or folder")
    return bad


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+)\s*[:?]?=\s*(\S+)", text, re.M))

    def expand(s: str) -> str:
        for _ in range(5):  # variables defined through variables: STAMP := $(VENV)/.installed
            s = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), s)
        return s

    return {expand(t) for line in re.findall(r"^([^\s#=:][^=:]*?)\s*:(?!=)", text, re.M) for t in line.split()}


def cli_verbs() -> set[str]:
    import argparse

    from oodcorr.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_readme_is_a_front_page():
    """The README stays short (issue 17: at most 12 KB); the rest lives in config/README.md and docs/."""
    size = (REPO / "README.md").stat().st_size
    assert size <= 12 * 1024, f"README.md is {size} bytes: move sections to docs/"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.startswith("docs/")])
def test_doc_pages_stay_short(doc):
    """Each page under docs/ is at most 500 lines (issue 55): a longer one is split by concept."""
    lines = len(read(doc).splitlines())
    assert lines <= 500, f"{doc} has {lines} lines: split it into pages by concept"


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS)
def test_repository_paths_exist(doc):
    assert missing_paths(doc) == []


@pytest.mark.parametrize("doc", DOCS)
def test_make_targets_exist(doc):
    shown = {m for s in code(read(doc)) for m in re.findall(r"(?:^|[\s;&(])make ([\w./-]+)", s)}
    assert shown - makefile_targets() == set()


@pytest.mark.parametrize("doc", DOCS)
def test_cli_verbs_exist(doc):
    shown = {m for s in code(read(doc)) for m in re.findall(r"(?:^|[\s/])oodcorr ([a-z][\w-]*)", s)}
    assert shown - cli_verbs() == set()


@pytest.mark.parametrize("doc", DOCS)
def test_configfiles_and_profiles_exist(doc):
    given = {
        m
        for s in code(read(doc))
        for m in re.findall(r"--(?:configfile|workflow-profile|profile)[ =]((?:config|profiles)/[\w./-]+)", s)
    }
    assert sorted(p for p in given if not (REPO / p).exists()) == []


def test_the_checks_see_the_claims():
    """The patterns above find what the docs do say: otherwise every test passes on nothing."""
    everything = "\n".join(read(d) for d in DOCS)
    assert len([link for d in DOCS for link in links(d)]) > 50
    assert {"config/schema.yaml", "profiles/slurm/config.yaml"} <= set().union(*(shown_paths(d) for d in DOCS))
    assert {"run", "test", "fuzz", "lint"} <= {
        m for d in DOCS for s in code(read(d)) for m in re.findall(r"(?:^|\s)make ([\w./-]+)", s)
    }
    assert {"analyse", "prefetch", "budget"} <= {
        m for d in DOCS for s in code(read(d)) for m in re.findall(r"oodcorr ([a-z]+)", s)
    }
    assert {c for c, _ in JOB_COUNT.findall(everything)} == {*DRY_RUN_CONFIGS, *CHECKED_ELSEWHERE}


def test_the_checks_catch_a_broken_link_path_and_anchor():
    """A doc with a dead link, a dead anchor, a missing path and a wrong target fails."""
    doc = REPO / "docs" / "_test_docs_probe.md"
    text = (
        "# Probe\n\n[ok](../README.md#two-commands) [gone](nowhere.md) [bad](../README.md#no-such-heading)"
        " [self](#probe)\n\n`config/no-such.yaml` `config/schema.yaml`\n"
    )
    doc.write_text(text)
    try:
        rel = str(doc.relative_to(REPO))
        assert broken_links(rel) == ["docs/nowhere.md: no such file", "README.md#no-such-heading: no such heading"]
        assert missing_paths(rel) == ["config/no-such.yaml: no such file or folder"]
    finally:
        doc.unlink()


def test_slugs_are_githubs():
    assert slug("Reading `agreement.csv`") == "reading-agreementcsv"
    assert slug("Columns of `partial_correlations.csv`") == "columns-of-partial_correlationscsv"
    assert slug("The authors' settings: `config/paper-authors.yaml`") == "the-authors-settings-configpaper-authorsyaml"
    assert slug("5. Analysis at scale: 149 testsets × 30 checkpoints") == (
        "5-analysis-at-scale-149-testsets--30-checkpoints"
    )


# A reference to the docs from code, a config or a registry: path#anchor.
DOC_REFERENCE = re.compile(r"(?<![\w/.-])((?:docs/[\w-]+|README|config/README|benchmarks/[\w-]+)\.md)#([\w-]+)")
REFERRING = ("src", "workflow", "config", "profiles", "resources", "benchmarks", "tests", "envs")


def doc_references() -> list[tuple[str, str, str]]:
    out = []
    for root in REFERRING:
        for f in sorted((REPO / root).rglob("*")):
            if f.suffix not in {".py", ".yaml", ".yml", ".smk", ".rst", ".md", ""} or not f.is_file():
                continue
            if f == Path(__file__).resolve() or "latest" in f.parts:
                continue
            for doc, anchor in DOC_REFERENCE.findall(f.read_text(encoding="utf-8", errors="replace")):
                out.append((str(f.relative_to(REPO)), doc, anchor))
    return out


def test_references_to_the_docs_from_code_and_configs_resolve():
    """Comments, docstrings, messages and report captions cite docs as path#anchor; each must exist."""
    refs = doc_references()
    assert len(refs) >= 10
    bad = [f"{f}: {d}#{a}" for f, d, a in refs if not (REPO / d).exists() or a not in anchors(REPO / d)]
    assert bad == []


def dry_run_total(config: str, workdir: Path) -> int:
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile", str(REPO / config)]
        + ["-n", "--quiet", "rules"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return int(re.search(r"^total\s+(\d+)$", res.stdout, re.M).group(1))


@pytest.mark.slow
@pytest.mark.parametrize("config", DRY_RUN_CONFIGS)
def test_stated_job_counts_equal_a_dry_run(config, tmp_path):
    stated = {int(n.replace(",", "")) for d in DOCS for c, n in JOB_COUNT.findall(read(d)) if c == config}
    assert stated, f"no doc states how many jobs {config} plans"
    assert stated == {dry_run_total(config, tmp_path)}


def _rules_in_workflow() -> set[str]:
    text = (REPO / "Snakefile").read_text() + "".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    return set(re.findall(r"^\s*rule (\w+):", text, re.M))


def _rules_in_diagram(doc: str) -> set[str]:
    text = (REPO / doc).read_text()
    block = re.search(r"## What the workflow does\n\n```\n(.*?)```", text, re.S)
    assert block, f"{doc}: no diagram under 'What the workflow does'"
    boxes = re.sub(r"\([^)]*\)", "", block.group(1))  # what a rule runs per, in brackets, names no rule
    return set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b|\b(?:finetune|evaluate|heatmap|scatter|explorer)\b", boxes))


def test_the_rule_diagram_shows_every_rule():
    """docs/how-it-works.md draws the workflow: every rule but the default target `all`, and
    nothing that is not a rule (a renamed or added rule fails this until the diagram follows)."""
    rules = _rules_in_workflow() - {"all"}
    drawn = _rules_in_diagram("docs/how-it-works.md")
    assert len(rules) >= 16
    assert drawn == rules, f"missing from the diagram: {sorted(rules - drawn)}; not rules: {sorted(drawn - rules)}"
