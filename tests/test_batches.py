"""``--batch``: sessions whose calls go to a local mock of OpenAI's Batch API and Anthropic's Message Batches."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR
from tests.ebs_project import _case
from tests.mock_batches import BATCHES, serve

CONFTEST = '''
import os

import llm

import fieldeval.calls.batches.rounds as rounds

pytest_plugins = ["fieldeval.plugin"]
rounds.POLL_S = rounds.POLL_MAX_S = 0.05  # the mock's batches end after a look or two


class Claude(llm.Model):
    """Shaped as llm-anthropic's Claude models: the anthropic key, claude_model_id, base_url, default_max_tokens."""

    model_id = "claude-batch"
    needs_key = "anthropic"
    key_env_var = "ANTHROPIC_API_KEY"
    can_stream = False
    claude_model_id = "claude-test"
    default_max_tokens = 1024

    class Options(llm.Options):
        temperature: float | None = None
        max_tokens: int | None = None

    def __init__(self):
        self.base_url = os.environ["MOCK_BATCH_BASE"]

    def execute(self, prompt, stream, response, conversation):
        raise RuntimeError("a batched model was called live")


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Claude())


llm.plugins.pm.register(Plugin(), name="claude-batch-plugin")
'''
PRICES = {"gpt-batch": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
          "claude-batch": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
LIVE_COST, BATCH_COST = (10 * 1.0 + 3 * 2.0) / 1e6, (10 * 1.0 + 3 * 2.0) / 2e6  # the mock's 10 and 3 tokens


@pytest.fixture(scope="module")
def mock():
    server = serve()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def project(pytester: pytest.Pytester, mock, monkeypatch) -> pytest.Pytester:
    BATCHES.reset()
    monkeypatch.setenv("MOCK_BATCH_BASE", mock)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("FIELDEVAL_STORE", str(pytester.path / "store.db"))
    monkeypatch.setenv("LLM_USER_PATH", str(pytester.path / "llm"))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    (pytester.path / "prices.yaml").write_text(yaml.safe_dump(PRICES))
    added = subprocess.run([sys.executable, "-m", "fieldeval.cli", "models", "add", "gpt-batch", "--endpoint",
                            f"{mock}/v1", "--batch"], cwd=pytester.path, capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    return pytester


def _suite(project: pytest.Pytester, cases: int) -> None:
    places = [("Iowa", "cropland biome [ENVO:01000245]"), ("Oregon", "forest biome [ENVO:01000174]")]
    suite = {"name": "batch", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert.", "prompt": "{input}"}},
             "cases": [_case(f"{places[i % 2][0]}-{i:03d}", "soil_data", places[i % 2][1]) for i in range(cases)]}
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))


def _args(model: str, *extra: str) -> list[str]:
    return ["evals", "--model", model, "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR, "--enum-dir",
            str(TINY_ENUMS), "--store", "none", "--prices", "prices.yaml", "-p", "no:cacheprovider", "--batch", *extra]


def _run(project: pytest.Pytester, model: str, cases: int, *extra: str):
    _suite(project, cases)
    result = project.runpytest_subprocess(*_args(model, *extra), timeout=300)
    report = project.path / "reports" / "report.json"
    return result, json.loads(report.read_text()) if report.is_file() else None


def _rows(project: pytest.Pytester) -> list[dict]:
    folders = [p for p in (project.path / "reports" / "runs").iterdir() if (p / "rows.jsonl").is_file()]
    folder = max(folders, key=lambda p: (p / "rows.jsonl").stat().st_mtime_ns)  # the latest session's
    return [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]


def _fieldeval(project: pytest.Pytester, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], cwd=project.path, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("model", "provider"), [("gpt-batch", "openai"), ("claude-batch", "anthropic")])
def test_a_batch_session_answers_every_item_at_the_batch_price_and_a_rerun_submits_nothing(project, model, provider):
    result, report = _run(project, model, 12)
    result.assert_outcomes(passed=12)
    assert [(b["provider"], len(b["lines"])) for b in BATCHES.created] == [(provider, 12)]
    rows = _rows(project)
    assert len(rows) == 12 and all(row["est_cost_usd"] == pytest.approx(BATCH_COST) for row in rows)
    assert not any(row["cached"] for row in rows)  # answered by this session's batch, not by an earlier run
    assert report["evals"]["benchmarks"]["ebs"][model]["exact_match"]["value"] == 1.0  # the mock's answers are the ideals
    assert "estimated" in result.stderr.str() and "at the batch price" in result.stderr.str()
    again, _ = _run(project, model, 12)
    again.assert_outcomes(passed=12)
    assert len(BATCHES.created) == 1  # every answer is in the cache: nothing submitted, nothing paid twice
    rows = _rows(project)
    assert all(row["cached"] for row in rows)
    assert all(row["est_cost_usd"] == pytest.approx(BATCH_COST) for row in rows)  # the price paid, not LIVE_COST
    assert BATCH_COST < LIVE_COST


def test_ibf_judgements_go_as_a_second_round_of_batches_each_epoch_its_own_line(project):
    (project.path / "evals" / "test_ibf.py").write_text((ROOT / "evals" / "test_ibf.py").read_text())
    args = ["evals/test_ibf.py", "--model", "gpt-batch", "--judge-model", "claude-batch", "--judge-epochs", "2",
            "--store", "none", "--prices", "prices.yaml", "-p", "no:cacheprovider", "--batch"]
    result = project.runpytest_subprocess(*args, timeout=300)
    result.assert_outcomes(passed=65)
    answers, judgements = BATCHES.created  # the answers first: a judge prompt holds the answer it grades
    assert (answers["provider"], len(answers["lines"])) == ("openai", 65)
    assert (judgements["provider"], len(judgements["lines"])) == ("anthropic", 130)  # both epochs in one round
    assert all("Response to grade:\n<<<\nforest biome [ENVO:01000174]\n>>>" in prompt
               for _, prompt in judgements["lines"])
    assert len({key for key, _ in judgements["lines"]}) == 130
    report = json.loads((project.path / "reports" / "report.json").read_text())
    scores = report["evals"]["benchmarks"]["ibf"]["gpt-batch"]
    assert scores["mean_dimension_score"]["value"] == 4.0  # the mock judge's grades, not the reference scorer's
    assert all(row["judge_repeats"] == [[4] * 5, [4] * 5] for row in _rows(project))
    again = project.runpytest_subprocess(*args, timeout=300)
    again.assert_outcomes(passed=65)
    assert len(BATCHES.created) == 2  # answers and judgements all in the cache


def test_failed_lines_go_again_in_the_next_batch_and_a_refused_one_fails_its_item(project):
    BATCHES.reset(fail_once=("Iowa",), refuse=("Oregon-001",))
    result, _ = _run(project, "gpt-batch", 8)
    result.assert_outcomes(passed=7, failed=1)
    first, second = BATCHES.created
    assert len(first["lines"]) == 8
    assert sorted(re.search(r"USA: ([\w-]+)", p).group(1) for _, p in second["lines"]) == [
        "Iowa-000", "Iowa-002", "Iowa-004", "Iowa-006"]  # the failed lines, once more; the refused one not
    [failed] = [line for line in result.stdout.str().splitlines() if line.startswith("FAILED evals/")]
    assert "case001" in failed and "HTTP 400: the prompt is refused" in result.stdout.str()
    assert "failed permanently" not in result.stdout.str() + result.stderr.str()  # one item's refusal, not the model's


def test_a_batch_that_expires_has_its_unanswered_lines_sent_again(project):
    BATCHES.reset(expire=True)  # every batch answers its first line only
    result, _ = _run(project, "claude-batch", 4)
    result.assert_outcomes(passed=4)
    assert [len(b["lines"]) for b in BATCHES.created] == [4, 3, 2, 1]


def test_a_session_killed_while_waiting_is_picked_up_without_a_second_submit(project):
    BATCHES.reset(polls=10**9)  # the batch never ends while the first session waits
    _suite(project, 6)
    session = subprocess.Popen([sys.executable, "-m", "pytest", *_args("gpt-batch")], cwd=project.path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not BATCHES.created and session.poll() is None and time.monotonic() < deadline:  # until it has submitted
        time.sleep(0.05)
    time.sleep(0.3)  # it is waiting now
    os.killpg(session.pid, signal.SIGKILL)
    session.wait(timeout=60)
    assert len(BATCHES.created) == 1
    listed = _fieldeval(project, "batches", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(b["id"], b["requests"], b["collected"]) for b in json.loads(listed.stdout)] == [
        (BATCHES.created[0]["id"], 6, False)]
    BATCHES.polls = 0  # the provider finishes it
    result, _ = _run(project, "gpt-batch", 6)
    result.assert_outcomes(passed=6)
    assert len(BATCHES.created) == 1  # picked up, not submitted again
    assert "no pending batches" in _fieldeval(project, "batches", "list").stdout


def test_past_batch_max_wait_the_items_fail_and_the_next_session_collects_the_batch(project):
    BATCHES.reset(polls=10**9)
    result, _ = _run(project, "gpt-batch", 4, "--batch-max-wait", "0.5")
    result.assert_outcomes(failed=4)
    assert "--batch-max-wait" in result.stdout.str() and "Traceback" not in result.stdout.str()
    batch_id = BATCHES.created[0]["id"]
    cancelled = _fieldeval(project, "batches", "cancel", batch_id)
    assert cancelled.returncode == 0 and BATCHES.cancelled == [batch_id], cancelled.stderr
    BATCHES.polls = 0  # batches end at the first look from now on
    result, _ = _run(project, "gpt-batch", 4)  # the cancelled batch answered its first line: collected, rest sent
    result.assert_outcomes(passed=4)
    assert [len(b["lines"]) for b in BATCHES.created] == [4, 3]


def test_a_model_without_a_batch_api_runs_live_with_one_line(project):
    result, _ = _run(project, "ebs-baseline", 4)
    result.assert_outcomes(passed=4)
    lines = [line for line in result.stderr.str().splitlines() if "no batch API" in line]
    assert lines == ["fieldeval batch: ebs-baseline has no batch API; its 4 uncached call(s) run live"]
    assert BATCHES.created == []


@pytest.mark.parametrize(("args", "needle"), [
    (["--cache", "off"], "--batch with --cache off"),
    (["--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["--batch-max-wait", "-1"], "--batch-max-wait -1"),
])
def test_bad_batch_options_are_one_line_and_exit_2(project, args, needle):
    _suite(project, 2)
    result = project.runpytest_subprocess(*_args("gpt-batch", *args), timeout=120)
    assert result.ret == 2
    lines = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], lines


def test_batches_cancel_of_an_unknown_id_is_one_line_and_exit_2(project):
    _run(project, "gpt-batch", 2)
    refused = _fieldeval(project, "batches", "cancel", "batch_<script>|[x]")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "no such batch" in refused.stderr
    missing = _fieldeval(project, "batches", "list", "--cache-path", "nowhere.sqlite")
    assert missing.returncode == 2 and "no response cache there" in missing.stderr
    for name, content in (("empty.sqlite", b""), ("binary.sqlite", bytes(range(256)) * 8),
                          ("bom.sqlite", "\ufeffSQLite format 3".encode())):
        (project.path / name).write_bytes(content)
        refused = _fieldeval(project, "batches", "list", "--cache-path", name)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "not a response cache" in refused.stderr
        assert (project.path / name).read_bytes() == content  # left as it was


def test_batches_are_split_to_the_providers_limits_in_order():
    from fieldeval.calls.batches.providers import split

    lines = [b"x" * n for n in (3, 3, 3, 5, 1)]
    assert list(split(lines, 2, 100)) == [lines[0:2], lines[2:4], lines[4:]]  # requests per batch
    assert list(split(lines, 10, 7)) == [lines[0:2], lines[2:3], lines[3:5]]  # bytes per batch: 6, 3, then 5 + 1
    assert [line for part in split(lines, 1, 1) for line in part] == lines  # a line over the byte limit goes alone


def test_a_batch_call_costs_the_tables_batch_rate_else_half_the_live_price():
    from fieldeval.calls.client import ModelClient

    client = ModelClient(prices={"a": {"input_per_mtok": 2.0, "output_per_mtok": 8.0},
                                 "b": {"input_per_mtok": 2.0, "output_per_mtok": 8.0, "batch_input_per_mtok": 1.5,
                                       "batch_output_per_mtok": 3.0}})
    assert client.estimate_cost("a", 1_000_000, 1_000_000) == 10.0
    assert client.estimate_cost("a", 1_000_000, 1_000_000, batch=True) == 5.0
    assert client.estimate_cost("b", 1_000_000, 1_000_000, batch=True) == 4.5


class _Provider:
    """A batch API that creates every batch it is sent (as ``batch_paid``), or refuses with ``refusal``."""

    name, base, max_requests, max_bytes, searchable = "openai", "http://x", 100, 10**6, False

    def __init__(self):
        self.created, self.cancelled = [], []

    def submit(self, lines, model, digest=None):
        self.created.append(digest)
        return "batch_paid"

    def cancel(self, batch_id, model):
        self.cancelled.append(batch_id)


class _Client:
    cache_mode = "use"

    def estimate_cost(self, *args, **kwargs):
        return None


def _groups(provider):
    class Request:
        prompt, system, options = "p", None, {}

    return {("openai", "http://x", "gpt-batch"): (provider, None, {"k1": (Request(), b"{}"), "k2": (Request(), b"{}")})}


def test_a_batch_the_ledger_cannot_record_is_cancelled_and_its_items_fail_with_the_reason(tmp_path, monkeypatch):
    import sqlite3

    from fieldeval.calls.batches.ledger import BatchLedger
    from fieldeval.calls.batches.rounds import BatchAnswers, BatchSettings, _submit

    ledger, provider, answers, said = BatchLedger(tmp_path / "cache.sqlite"), _Provider(), BatchAnswers(), []

    def full(*args):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ledger, "confirm", full)  # the intent was recorded; the disk filled during the create
    pending, created = _submit(_Client(), ledger, _groups(provider), BatchSettings(max_wait_s=1), answers, said.append)
    assert created == set() and provider.cancelled == ["batch_paid"]
    assert sorted(answers.failed) == ["k1", "k2"]
    assert "could not be recorded" in answers.failed["k1"].detail and "disk is full" in answers.failed["k1"].detail
    [line] = [line for line in said if "batch_paid" in line]
    assert "cancelled it" in line and "database or disk is full" in line


def test_a_batch_whose_intent_cannot_be_recorded_is_never_sent(tmp_path, monkeypatch):
    # the batch was created first and recorded after: a ledger that failed in between left a paid batch unknown
    import sqlite3

    from fieldeval.calls.batches.ledger import BatchLedger
    from fieldeval.calls.batches.rounds import BatchAnswers, BatchSettings, _submit

    ledger, provider, answers, said = BatchLedger(tmp_path / "cache.sqlite"), _Provider(), BatchAnswers(), []

    def full(*args):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ledger, "intend", full)
    _submit(_Client(), ledger, _groups(provider), BatchSettings(max_wait_s=1), answers, said.append)
    assert provider.created == [] and sorted(answers.failed) == ["k1", "k2"]
    assert "nothing was submitted" in answers.failed["k1"].detail


def _start(project: pytest.Pytester, model: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *_args(model, *extra)], cwd=project.path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(condition, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_session_killed_during_the_create_has_its_batch_found_not_paid_again(project):
    # the batch was created at the provider and never recorded: the rerun submitted the same requests again
    BATCHES.reset(create_delay=3.0)
    _suite(project, 6)
    session = _start(project, "gpt-batch")
    _wait_for(BATCHES.creating.is_set)
    os.killpg(session.pid, signal.SIGKILL)
    session.wait(timeout=60)
    _wait_for(lambda: len(BATCHES.created) == 1)  # the provider finished the create the session never heard of
    listed = json.loads(_fieldeval(project, "batches", "list", "--json").stdout)
    assert [(b["state"], b["requests"]) for b in listed] == [("creating", 6)]  # the intent, recorded first
    BATCHES.create_delay, BATCHES.polls = 0.0, 0
    result, _ = _run(project, "gpt-batch", 6)
    result.assert_outcomes(passed=6)
    assert len(BATCHES.created) == 1  # found by its request set's digest in the batch's metadata
    assert f"found {BATCHES.created[0]['id']}" in result.stderr.str()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_during_the_create_waits_until_the_batch_is_recorded(project, sig):
    BATCHES.reset(create_delay=3.0, polls=10**9)
    _suite(project, 4)
    session = _start(project, "gpt-batch")
    _wait_for(BATCHES.creating.is_set)
    os.kill(session.pid, sig)
    _, err = session.communicate(timeout=120)
    assert "received while a batch is being created" in err and "Traceback" not in err
    assert len(BATCHES.created) == 1
    listed = json.loads(_fieldeval(project, "batches", "list", "--json").stdout)
    assert [(b["id"], b["state"]) for b in listed] == [(BATCHES.created[0]["id"], "submitted")]
    BATCHES.create_delay, BATCHES.polls = 0.0, 0
    result, _ = _run(project, "gpt-batch", 4)
    result.assert_outcomes(passed=4)
    assert len(BATCHES.created) == 1


def test_a_create_whose_answer_is_lost_is_found_at_the_provider_in_the_same_session(project):
    # the session said "openai refused a batch", failed the items, and the rerun created a second batch
    BATCHES.reset(drop_create=True)
    result, _ = _run(project, "gpt-batch", 4)
    result.assert_outcomes(passed=4)
    assert len(BATCHES.created) == 1 and "refused" not in result.stderr.str()


def test_a_lost_create_at_a_provider_that_cannot_be_searched_waits_for_the_users_word(project):
    BATCHES.reset(drop_create=True)
    result, _ = _run(project, "claude-batch", 4)
    result.assert_outcomes(failed=4)
    assert "cannot be searched" in result.stderr.str() and "fieldeval batches forget creating-" in result.stderr.str()
    BATCHES.drop_create = False
    again, _ = _run(project, "claude-batch", 4)
    again.assert_outcomes(failed=4)
    assert len(BATCHES.created) == 1  # never created again without the user's word
    [intent] = json.loads(_fieldeval(project, "batches", "list", "--json").stdout)
    forgotten = _fieldeval(project, "batches", "forget", intent["id"])
    assert forgotten.returncode == 0 and "run as new" in forgotten.stdout
    result, _ = _run(project, "claude-batch", 4)
    result.assert_outcomes(passed=4)
    assert len(BATCHES.created) == 2


def test_two_sessions_at_once_on_one_cache_submit_one_batch(project):
    BATCHES.reset(create_delay=3.0)
    _suite(project, 10)
    first, second = _start(project, "gpt-batch"), _start(project, "gpt-batch")
    outs = [session.communicate(timeout=300) for session in (first, second)]
    assert [session.returncode for session in (first, second)] == [0, 0], outs
    assert [len(b["lines"]) for b in BATCHES.created] == [10]


def test_a_batch_the_provider_forgot_fails_its_items_until_forgotten_then_they_run_as_new(project):
    BATCHES.reset(polls=10**9)
    result, _ = _run(project, "gpt-batch", 4, "--batch-max-wait", "0.3")
    result.assert_outcomes(failed=4)
    batch_id = BATCHES.created[0]["id"]
    BATCHES.forget()
    BATCHES.polls = 0
    result, _ = _run(project, "gpt-batch", 4)
    result.assert_outcomes(failed=4)
    assert f"does not know batch {batch_id}" in result.stderr.str() and "batches forget" in result.stderr.str()
    assert len(BATCHES.created) == 1
    cancelled = _fieldeval(project, "batches", "cancel", batch_id)  # the 404 means it is gone: forgotten
    assert cancelled.returncode == 0 and "forgotten" in cancelled.stdout, cancelled.stderr
    result, _ = _run(project, "gpt-batch", 4)
    result.assert_outcomes(passed=4)
    assert len(BATCHES.created) == 2


def test_a_damaged_cache_carries_its_pending_batch_over(project):
    # the damaged file was moved aside with its ledger: the warning did not mention the batch, the rerun paid again
    import sqlite3

    BATCHES.reset(polls=10**9)
    result, _ = _run(project, "gpt-batch", 40, "--batch-max-wait", "0.3")
    result.assert_outcomes(failed=40)
    cache = project.path / "reports" / "responses.sqlite"
    db = sqlite3.connect(cache, isolation_level=None)  # answers of earlier runs fill several pages of responses
    db.executemany("INSERT INTO responses (key, model, text) VALUES (?, 'm', ?)",
                   ((f"k{i}", "x" * 500) for i in range(400)))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'responses'").fetchone()[0]
    db.close()
    with open(cache, "r+b") as damaged:  # the responses table's root page is garbage; the ledger's pages are not
        damaged.seek((root - 1) * page_size + 8)
        damaged.write(b"\xff" * 64)
    BATCHES.polls = 0
    result, _ = _run(project, "gpt-batch", 40)
    assert "is damaged" in result.stderr.str()
    assert f"1 pending batch(es) ({BATCHES.created[0]['id']}) were carried over" in result.stderr.str()
    result.assert_outcomes(passed=40)
    assert len(BATCHES.created) == 1
