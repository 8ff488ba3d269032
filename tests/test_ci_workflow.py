"""CI gates for real: the workflow runs the suite, never twice on dispatch, and fails shards with nothing to run.

The workflow is read as data: which events start it, each job's ``if:`` parsed and evaluated for an event as
GitHub evaluates it (with its implied ``success()`` and its ``needs``), and the commands its steps run. A shard's
guard is run with bash, as the runner runs it, against a stand-in ``.venv/bin/pytest`` that records its calls.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "evals.yml"
STATUS_FUNCTIONS = {"success", "failure", "always", "cancelled"}


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _jobs() -> dict:
    return _workflow()["jobs"]


# --- GitHub expressions (the subset an ``if:`` uses): parsed to a tree, then evaluated -------------------

_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|<=|>=|&&|\|\||[!<>(),])|'(?P<str>(?:[^']|'')*)'"
                    r"|(?P<num>-?\d+(?:\.\d+)?)|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_*][\w-]*)*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if not match or match.end() == at:
            raise ValueError(f"cannot read {text[at:]!r} in {text!r}")
        kind = match.lastgroup
        out.append((kind, match.group(kind) if kind != "str" else match.group(kind).replace("''", "'")))
        at = match.end()
    return out


def parse_expression(text: str):
    """``a == 'b' && f()`` as nested tuples: ``("and", ("==", ("ctx", "a"), ("lit", "b")), ("call", "f", []))``."""
    text = text.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    tokens, at = _tokens(text), 0

    def peek():
        return tokens[at] if at < len(tokens) else (None, None)

    def take(value=None):
        nonlocal at
        token = peek()
        if value is not None and token[1] != value:
            raise ValueError(f"expected {value!r} in {text!r}, found {token[1]!r}")
        at += 1
        return token

    def chained(operand, op: str, name: str):
        """``operand (op operand)*``, left-associative, as ``(name, left, right)``."""
        def parse():
            left = operand()
            while peek() == ("op", op):
                take()
                left = (name, left, operand())
            return left
        return parse

    def disjunction():
        return chained(conjunction, "||", "or")()

    def conjunction():
        return chained(negation, "&&", "and")()

    def negation():
        if peek() == ("op", "!"):
            take()
            return ("not", negation())
        return comparison()

    def comparison():
        left = primary()
        if peek()[0] == "op" and peek()[1] in ("==", "!=", "<", ">", "<=", ">="):
            return (take()[1], left, primary())
        return left

    def primary():
        kind, value = take()
        if (kind, value) == ("op", "("):
            inner = disjunction()
            take(")")
            return inner
        if kind == "str":
            return ("lit", value)
        if kind == "num":
            return ("lit", float(value))
        if kind == "name" and value in ("true", "false", "null"):
            return ("lit", {"true": True, "false": False, "null": None}[value])
        if kind == "name" and peek() == ("op", "("):
            take("(")
            args = []
            while peek() != ("op", ")"):
                args.append(disjunction())
                if peek() == ("op", ","):
                    take()
            take(")")
            return ("call", value.lower(), args)
        if kind == "name":
            return ("ctx", value)
        raise ValueError(f"unexpected {value!r} in {text!r}")

    tree = disjunction()
    if at != len(tokens):
        raise ValueError(f"trailing {tokens[at:]!r} in {text!r}")
    return tree


def _uses_status_function(tree) -> bool:
    if tree[0] == "call":
        return tree[1] in STATUS_FUNCTIONS or any(_uses_status_function(arg) for arg in tree[2])
    return any(_uses_status_function(part) for part in tree[1:] if isinstance(part, tuple))


def _loose(value):
    """GitHub's coercion for comparing values of different types: numbers (null, '' and false are 0)."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value) if value.strip() else 0.0
        except ValueError:
            return float("nan")
    return float(value)


def evaluate(tree, context: dict, *, needs_succeeded: bool = True):
    """The value of a parsed expression; ``context`` maps dotted names (``github.event_name``) to values."""
    kind = tree[0]
    if kind == "lit":
        return tree[1]
    if kind == "ctx":
        return context.get(tree[1])
    if kind == "not":
        return not evaluate(tree[1], context, needs_succeeded=needs_succeeded)
    if kind in ("and", "or"):
        left = evaluate(tree[1], context, needs_succeeded=needs_succeeded)
        if (kind == "and") != bool(left):
            return left
        return evaluate(tree[2], context, needs_succeeded=needs_succeeded)
    if kind == "call":
        name = tree[1]
        if name in STATUS_FUNCTIONS:
            return {"success": needs_succeeded, "failure": False, "always": True, "cancelled": False}[name]
        args = [evaluate(arg, context, needs_succeeded=needs_succeeded) for arg in tree[2]]
        if name == "startswith":
            return str(args[0] or "").lower().startswith(str(args[1] or "").lower())
        if name == "contains":
            return str(args[1] or "").lower() in str(args[0] or "").lower()
        raise ValueError(f"no evaluation here for {name}()")
    left, right = (evaluate(part, context, needs_succeeded=needs_succeeded) for part in tree[1:])
    if isinstance(left, str) and isinstance(right, str):
        left, right = left.lower(), right.lower()  # GitHub compares strings ignoring case
    elif type(left) is not type(right):
        left, right = _loose(left), _loose(right)
    return {"==": left == right, "!=": left != right, "<": left < right, ">": left > right,
            "<=": left <= right, ">=": left >= right}[kind]


def test_the_expression_reader_reads_as_github_does():
    context = {"github.event_name": "push", "steps.mode.outputs.cache": "use"}
    assert evaluate(parse_expression("github.event_name == 'PUSH'"), context) is True  # ignoring case
    assert evaluate(parse_expression("${{ github.event_name != 'push' }}"), context) is False
    assert evaluate(parse_expression("env.UNSET != ''"), context) is False  # an unset value is empty
    assert evaluate(parse_expression("always() && steps.mode.outputs.cache == 'use'"), context,
                    needs_succeeded=False) is True
    assert evaluate(parse_expression("!(github.event_name == 'push' || false)"), context) is False
    assert parse_expression("a == 'b' && f()") == ("and", ("==", ("ctx", "a"), ("lit", "b")), ("call", "f", []))


# --- which jobs run for an event -------------------------------------------------------------------------


def _triggers() -> dict:
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as true
    return {event: (config or {}) for event, config in
            (triggers.items() if isinstance(triggers, dict) else ((name, None) for name in triggers))}


def _starts(event: str, branch: str | None = None) -> bool:
    """Whether the event (on ``branch``, for push and pull_request) starts the workflow."""
    config = _triggers().get(event)
    if config is None:
        return False
    branches = config.get("branches")
    return branches is None or branch is None or any(fnmatch.fnmatchcase(branch, pattern) for pattern in branches)


def _jobs_run(event: str, **context: str) -> set[str]:
    """The jobs that run when ``event`` starts the workflow (every job that runs succeeding)."""
    jobs, ran = _jobs(), {}
    context = {"github.event_name": event, **context}

    def runs(name: str) -> bool:
        if name not in ran:
            job = jobs[name]
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else list(needs)
            succeeded = all(runs(need) for need in needs)
            condition = job.get("if", "success()")
            tree = parse_expression(str(condition)) if not isinstance(condition, bool) else ("lit", condition)
            if not _uses_status_function(tree):  # GitHub's implied success() && ...
                tree = ("and", ("call", "success", []), tree)
            ran[name] = bool(evaluate(tree, context, needs_succeeded=succeeded))
        return ran[name]

    return {name for name in jobs if runs(name)}


def test_the_workflow_runs_on_pushes_to_main_pull_requests_and_by_hand():
    assert set(_triggers()) == {"push", "pull_request", "workflow_dispatch"}
    assert _starts("push", "main") and not _starts("push", "feature/x")
    assert _starts("pull_request", "feature/x") and _starts("workflow_dispatch")


def test_dispatch_runs_the_shards_only_and_push_runs_the_full_job_only():
    for event in ("push", "pull_request"):
        ran = _jobs_run(event)
        assert "evals" in ran and not ran & {"shard", "merge"}, (event, ran)
    dispatched = _jobs_run("workflow_dispatch")
    assert {"shard", "merge"} <= dispatched and "evals" not in dispatched, dispatched
    assert "shard" in _jobs()["merge"].get("needs", [])  # the merge waits for every shard


# --- what the steps run ----------------------------------------------------------------------------------


SEPARATORS = set(";&|\n")
KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!"}


def _without_comments(script: str) -> str:
    """The script with its ``#`` comments cut (outside quotes, at a word's start), each line's end kept."""
    out, quote, at = [], None, 0
    while at < len(script):
        char = script[at]
        if quote is None and char == "#" and (at == 0 or script[at - 1] in " \t\n;"):
            while at < len(script) and script[at] != "\n":
                at += 1
            continue
        if char == "\\" and quote != "'":  # the next character is taken as it is
            out.append(script[at:at + 2])
            at += 2
            continue
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        out.append(char)
        at += 1
    return "".join(out)


def _commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, as the shell splits its words: at new lines (not quoted, nor
    after a backslash) and at ; && || | &, each without a leading ``if``/``then``/``else``..."""
    lexer = shlex.shlex(_without_comments(script).replace("\\\n", " "), posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace, lexer.whitespace_split, lexer.commenters = " \t\r", True, ""
    out, command = [], []
    for token in lexer:
        if set(token) <= SEPARATORS:
            out.append(command)
            command = []
        elif command or token not in KEYWORDS:
            command.append(token)
    out.append(command)
    return [command for command in out if command]


def _pytest_args(command: list[str]) -> list[str] | None:
    """The arguments of a pytest invocation (``pytest ...`` or ``python -m pytest ...``), else None."""
    if command and Path(command[0]).name == "pytest":
        return command[1:]
    if len(command) > 2 and Path(command[0]).name.startswith("python") and command[1:3] == ["-m", "pytest"]:
        return command[3:]
    return None


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_a_job_runs_the_projects_tests_fast_then_the_slow_cases():
    runs = []  # (job, step number, pytest arguments) of every `pytest tests ...`
    for name, job in _jobs().items():
        for number, step in enumerate(job["steps"]):
            for command in _commands(step.get("run", "")):
                args = _pytest_args(command)
                if args is not None and args[:1] == ["tests"]:
                    runs.append((name, number, args))
    assert len({name for name, _, _ in runs}) == 1, runs  # one job runs the project's tests
    name = runs[0][0]
    fast = [number for _, number, args in runs if _option(args, "-m") is None]  # pyproject's -m 'not slow'
    slow = [number for _, number, args in runs if _option(args, "-m") == "slow"]
    assert fast and slow and max(fast) < min(slow), runs  # every fast run before the slow cases
    assert all(_option(args, "-n") == "auto" for _, _, args in runs)  # in parallel
    assert name in _jobs_run("push") and name in _jobs_run("pull_request")


def _shard_guard() -> tuple[dict, dict]:
    """The shard job and its step that runs the suite's part."""
    job = _jobs()["shard"]
    [step] = [step for step in job["steps"]
              if any(_option(_pytest_args(command) or [], "--run-group") for command in _commands(step.get("run", "")))]
    return job, step


def _run_step(tmp_path: Path, job: dict, step: dict, values: dict[str, str], pytest_exit: int = 0):
    """Run a step's script as the runner does (``bash -e``), in a checkout whose ``.venv/bin/pytest`` records
    its arguments; an env value GitHub would fill from an expression is ``values``' (an absent secret is '')."""
    script = step["run"]
    assert "${{" not in script  # nothing is spliced into the script before the shell reads it
    env = {}
    for key, value in {**job.get("env", {}), **step.get("env", {})}.items():
        env[key] = values.get(key, "") if "${{" in str(value) else str(value)
    unknown = set(values) - set(env)
    assert not unknown, f"not an env of the step: {unknown}"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = bin_dir / "pytest"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$PYTEST_CALLS"\nexit "$PYTEST_EXIT"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "step.sh").write_text(script)
    calls = tmp_path / "pytest-calls"
    calls.unlink(missing_ok=True)
    done = subprocess.run(["bash", "-e", str(tmp_path / "step.sh")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"], "GITHUB_RUN_ID": "4242", "GITHUB_SHA": "abc123",
                                           "PYTEST_CALLS": str(calls), "PYTEST_EXIT": str(pytest_exit), **env})
    return done, (calls.read_text().splitlines() if calls.exists() else [])


KEYS = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "FIELDEVAL_STORE": "postgresql://ci/store",
        "GROUP": "2", "DESIGN": "splits", "REF_NAME": "main"}


@pytest.mark.parametrize("missing", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FIELDEVAL_STORE"])
def test_a_shard_without_provider_keys_fails_before_running_anything(tmp_path, missing):
    # shards with no keys errored on every item, were stored as completed, and merged green (issue 20)
    job, step = _shard_guard()
    done, calls = _run_step(tmp_path, job, step, {k: v for k, v in KEYS.items() if k != missing})
    assert done.returncode != 0 and calls == [], (done.returncode, calls, done.stdout)
    # with everything set, the same step does run its part of the suite
    done, calls = _run_step(tmp_path, job, step, KEYS)
    assert done.returncode == 0, done.stdout + done.stderr
    [args] = [shlex.split(call) for call in calls]
    assert args[0] == "evals" and (_option(args, "--splits"), _option(args, "--group")) == ("5", "2")
    assert _option(args, "--run-group") == "4242"


def test_a_matrix_shard_runs_its_models_job_of_the_matrix(tmp_path):
    job, step = _shard_guard()
    done, calls = _run_step(tmp_path, job, step, {**KEYS, "DESIGN": "matrix", "GROUP": "3"})
    assert done.returncode == 0, done.stdout + done.stderr
    [args] = [shlex.split(call) for call in calls]
    assert args[0] == "evals/test_ebs.py" and "--matrix" in args and _option(args, "--matrix-job") == "3"


@pytest.mark.parametrize(("pytest_exit", "shard_fails"), [(0, False), (1, False), (2, True), (3, True)])
def test_a_shards_failed_items_are_left_to_the_merge_and_any_other_exit_fails_it(tmp_path, pytest_exit,
                                                                                  shard_fails):
    # exit 1 (an item failed, or a gate on this shard's part alone) is judged by the merge, over the union
    job, step = _shard_guard()
    done, calls = _run_step(tmp_path, job, step, KEYS, pytest_exit=pytest_exit)
    assert len(calls) == 1 and (done.returncode != 0) == shard_fails, (done.returncode, done.stdout)


def test_slow_cases_are_a_registered_marker_left_out_by_default(tmp_path):
    # pytest with the project's own configuration, on a module with one slow case and one fast one
    (tmp_path / "test_marks.py").write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_slow():\n    pass\n\n\n"
                                            "def test_fast():\n    pass\n")

    def collected(*extra: str) -> set[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                               str(tmp_path), "--strict-markers", "--collect-only", "-q", "-p", "no:cacheprovider",
                               str(tmp_path / "test_marks.py"), *extra], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr  # --strict-markers: `slow` is registered
        return {line.rsplit("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}

    assert collected() == {"test_fast"}
    assert collected("-m", "slow") == {"test_slow"}


def test_zizmor_finds_nothing_of_medium_severity_or_above():
    zizmor = Path(sys.executable).parent / "zizmor"
    done = subprocess.run([str(zizmor), "--offline", "--min-severity", "medium", str(WORKFLOW)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
