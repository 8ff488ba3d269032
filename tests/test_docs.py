"""The README and the docs site say only what exists: commands, options, links and pages."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fieldeval.cli import build_parser
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _pages() -> list[Path]:
    """README.md and every Markdown page of the docs site (not the example package's files)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "examples" not in p.relative_to(DOCS).parts)]


def _prose(text: str) -> str:
    """``text`` without its fenced blocks and inline code, where a link is only an example."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` by name (argparse keeps them on a private action class)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _command(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser ``fieldeval WORDS...`` reaches, and the words it resolved (an unknown word raises KeyError)."""
    parser, resolved = build_parser(), []
    for word in words:
        subs = _subparsers(parser)
        if not subs or not re.fullmatch(r"[a-z][a-z-]*", word):
            break  # a positional (BENCH, RUN, a path) or an option: the command is resolved
        parser = subs[word]
        resolved.append(word)
    return parser, resolved


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings if s.startswith("--")}


def _quick_start_block() -> list[str]:
    """The command lines of the first ```bash block after the README's "## Quick start"."""
    text = README.read_text(encoding="utf-8")
    after = text[text.index("\n## Quick start") :]
    match = FENCE.search(after)
    assert match is not None and match.group(1) == "bash", "the Quick start must open with a ```bash block"
    return [line for line in match.group(2).splitlines() if line.strip()]


def _recipes() -> Iterator[tuple[Path, dict]]:
    """Every GitHub Actions workflow written in the README or on a docs page."""
    for page in _pages():
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            if lang == "yaml" and "jobs:" in body:
                yield page, yaml.safe_load(body)


def _commands(script: str) -> Iterator[list[str]]:
    """Each simple command of a shell script as words: continuations joined, split at | && ; $( )."""
    joined = script.replace("\\\n", " ")
    for line in joined.splitlines():
        for part in re.split(r"\|\||&&|\||;|\$\(|\)", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:  # an unbalanced quote of a jq program cut at a pipe
                words = part.split()
            if words:
                yield words


@pytest.fixture(scope="module")
def pytest_options() -> set[str]:
    """The long options ``pytest --help`` lists in its option column, run as a user would."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=None)
    assert done.returncode == 0, done.stderr
    options = set()
    for line in done.stdout.splitlines():
        if line.startswith("  -"):
            options.update(re.findall(r"--[A-Za-z][\w-]*", line.strip().split("  ")[0]))
    assert "--model" in options and "--baseline-run" in options
    return options


def test_readme_is_a_front_door_of_at_most_220_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 220


def test_ci_extracts_the_readmes_two_quick_start_commands():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    program = re.search(r"awk '([^']*)' README\.md", ci)
    assert program is not None, ".ci/run no longer extracts the Quick start with awk"
    if shutil.which("awk") is None:
        pytest.fail("awk is needed to check the Quick start as .ci/run reads it")
    extracted = subprocess.run(["awk", program.group(1), "README.md"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.splitlines()
    block = _quick_start_block()
    assert len(block) == 2, f"the Quick start block holds {len(block)} command lines; .ci/run runs exactly two"
    assert extracted == block


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_that_exists(page: Path):
    missing = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_every_fieldeval_command_the_readme_names_exists():
    text = README.read_text(encoding="utf-8")
    code = "\n".join(body for _, body in FENCE.findall(text)) + "\n" + "\n".join(
        re.findall(r"`([^`]+)`", FENCE.sub("", text)))
    named = re.findall(r"(?<![\w./-])fieldeval((?: [a-z][a-z-]*)+)", code)
    assert named, "the README names no fieldeval command"
    for words in named:
        try:
            _, resolved = _command(words.split())
        except KeyError as exc:
            pytest.fail(f"README names `fieldeval{words}`, but {exc} is not a subcommand there")
        assert resolved, f"README names `fieldeval{words}`, which is no subcommand"


def test_every_option_of_the_workflow_recipes_exists(pytest_options: set[str]):
    recipes = list(_recipes())
    assert any(page == README for page, _ in recipes), "the README has no GitHub Actions recipe"
    for page, workflow in recipes:
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                for words in _commands(step.get("run", "")):
                    program = Path(words[0]).name
                    if program == "pytest":
                        known = pytest_options
                    elif program == "fieldeval":
                        known = _long_options(_command(words[1:])[0])
                    else:
                        continue
                    passed = [o for w in words for o in re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", w)]  # ${X:+--opt}
                    unknown = [o for o in passed if o not in known]
                    assert not unknown, f"{page.relative_to(ROOT)}: `{' '.join(words)}` passes {unknown}"


def test_the_site_nav_names_existing_pages_and_every_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs_dir = ROOT / config.get("docs_dir", "docs")

    def pages(nav) -> Iterator[str]:
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            if isinstance(value, list):
                yield from pages(value)
            elif not re.match(r"[a-z]+://", value):
                yield value

    named = list(pages(config["nav"]))
    assert [p for p in named if not (docs_dir / p).is_file()] == []
    on_disk = {str(p.relative_to(docs_dir)) for p in _pages() if p != README}
    assert on_disk - set(named) == set(), "pages missing from mkdocs.yml's nav"
