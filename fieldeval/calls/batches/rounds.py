"""``--batch``: a session's uncached calls sent as provider batches, in rounds, before its solvers run live.

A round runs every item's solver against a :class:`_Deferring` client: a call whose answer is known (in the
response cache, or answered by a batch this session) returns it, so a solver that calls twice (answer, then
judgement) reaches its next call in the next round; any other call is recorded and the solver stops there.
The recorded requests of models with a batch API (:func:`fieldeval.calls.batches.providers.provider_for`)
that no pending batch holds are priced, split to fit the provider's limits (or ``--batch-size``), submitted
and recorded in the cache's ledger; then the session waits for every batch that holds one of its requests,
its own or an earlier session's, up to ``--batch-max-wait``, and puts each answer in the cache under the
live call's key. A failed line is sent again in the next round while its retries last (``--retries``); past
them, or for a permanent error, its item fails with that error, as a live call's would. Rounds end when a
round records no request a batch API can take. The solvers then run as usual: every batched call is
answered from the session's batch answers, and models without a batch API run live (one line says so).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fieldeval.calls.batches.ledger import BatchLedger, request_set_digest
from fieldeval.calls.batches.providers import (GONE, Answer, CreationUnknown, NotKnown, provider_for, request_body,
                                               split)
from fieldeval.calls.cache import CachedResponse
from fieldeval.calls.failures import ModelCallError, PermanentCallError, TransientCallError, classify
from fieldeval.calls.records import Completion

POLL_S = 10.0  # the first wait between two looks at a batch; it grows to POLL_MAX_S
POLL_MAX_S = 60.0
UNREAD_LIMIT = 20  # looks in a row without a usable answer before a batch's items fail with the last error
CHARS_PER_TOKEN = 4
OUTPUT_TOKENS_GUESS = 100


@dataclass(frozen=True)
class BatchSettings:
    """``--batch``'s settings: the longest wait in seconds and the most requests per batch (None: the provider's)."""

    max_wait_s: float
    size: int | None = None


class _Deferred(BaseException):
    """A call a round cannot answer yet (a BaseException, so a solver's own ``except Exception`` lets it by)."""


@dataclass
class BatchAnswers:
    """What the rounds leave for the live solvers: answers by key, and the keys that failed or still wait."""

    answers: dict[str, CachedResponse] = field(default_factory=dict)
    failed: dict[str, ModelCallError] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # key -> the pending batch's id (past --batch-max-wait)

    def answer(self, key: str, model: str) -> CachedResponse | None:
        """The batch's answer to a request; raises the request's final error (or its pending batch's)."""
        if key in self.answers:
            return self.answers[key]
        if key in self.failed:
            raise self.failed[key]
        if key in self.waiting:
            raise ModelCallError(model, f"its batch {self.waiting[key]} had not ended when the session stopped "
                                 "waiting (--batch-max-wait, or an interrupt); run the same command again to "
                                 "collect it (it is never submitted twice)", kind="transient")
        return None


class _Deferring:
    """A solver's ``client`` in a round: known answers come back; the first unknown call is recorded."""

    def __init__(self, client: Any, context: Any, answers: BatchAnswers, found: dict[str, Any]) -> None:
        self.client, self.context, self.answers, self.found = client, context, answers, found

    def complete(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                 max_tokens: int | None = None, schema: dict | None = None) -> Completion:
        request = self.client.request(model_id, prompt, system=system, temperature=temperature,
                                      max_tokens=max_tokens, schema=schema)
        key = request.key
        known = self.answers.answers.get(key)
        cache = self.client.cache if self.client.cache_mode == "use" else None
        if known is None and cache is not None:
            known = cache.get(key)
        if known is not None:
            return Completion(request.model_id, known.text, 0.0, known.prompt_tokens, known.completion_tokens,
                              system=request.system, prompt=request.prompt, options=request.options)
        if key not in self.answers.failed and key not in self.answers.waiting:
            self.found.setdefault(key, request)
        raise _Deferred

    def complete_many(self, calls: Sequence[Mapping[str, Any]]) -> list[Completion]:
        """Every call of the group asked in this round (they do not wait on each other); deferred if one is."""
        done, deferred = [], False
        for call in calls:
            try:
                done.append(self.complete(**call))
            except _Deferred:
                deferred = True
        if deferred:
            raise _Deferred
        return done


def run_batches(jobs: Iterable[tuple[Callable[[Any], Any], Any]], client: Any, settings: BatchSettings, *,
                say: Callable[[str], None] = lambda line: sys.stderr.write(line + "\n"),
                sleep: Callable[[float], None] = time.sleep) -> BatchAnswers:
    """Run the rounds for ``(solve(client), context)`` jobs; the answers the live solvers then use."""
    jobs = list(jobs)
    answers = BatchAnswers()
    ledger = BatchLedger(client.cache.path)
    tries: Counter[str] = Counter()
    live_said: set[str] = set()
    try:
        while True:
            found: dict[str, Any] = {}
            for solve, context in jobs:
                try:
                    solve(_Deferring(client, context, answers, found))
                except _Deferred:
                    pass
                except Exception:  # noqa: BLE001 - the solver's own error shows when it runs live
                    pass
            batchable, live = _by_provider(client, found)
            for model, count in live.items():
                if model not in live_said:
                    live_said.add(model)
                    say(f"fieldeval batch: {model} has no batch API; its {count} uncached call(s) run live")
            pending, submitted = _submit(client, ledger, batchable, settings, answers, say)
            waited = set(pending.values()) | submitted
            if not waited:
                return answers
            if not _wait(client, ledger, waited, settings, answers, tries, say, sleep):
                for key, batch_id in ledger.pending_for(found).items():
                    answers.waiting[key] = batch_id
                return answers
    finally:
        ledger.close()


def _by_provider(client: Any, found: dict[str, Any]) -> tuple[dict[tuple, tuple], Counter]:
    """``{(provider name, base, model): (provider, model object, {key: line})}`` and uncached calls per live model."""
    groups: dict[tuple, tuple] = {}
    live: Counter[str] = Counter()
    providers: dict[str, Any] = {}
    for key, request in found.items():
        model = client.model(request.model_id)
        if request.model_id not in providers:
            try:
                providers[request.model_id] = provider_for(model)
            except Exception:  # noqa: BLE001 - no key, say: the live call names the error and its fix, per item
                providers[request.model_id] = None
        provider = providers[request.model_id]
        body = request_body(provider, model, request) if provider is not None else None
        if body is None:
            live[request.model_id] += 1
            continue
        group = groups.setdefault((provider.name, provider.base, request.model_id), (provider, model, {}))
        group[2][key] = (request, provider.line(request, body))
    return groups, live


def _submit(client: Any, ledger: BatchLedger, groups: dict, settings: BatchSettings, answers: BatchAnswers,
            say: Callable[[str], None]) -> tuple[dict[str, str], set[str]]:
    """Under the cache's submission lock: settle the intents an earlier session left (:func:`_recover`), then
    submit each group's requests that no pending batch holds, each batch's intent recorded first. Returns the
    pending ``{key: batch id}`` of the groups' requests and the ids of the batches this session created or
    adopted. A submission the provider refuses fails its requests' items with its error (they are not sent
    live: a batch session never pays the live price unasked)."""
    created: set[str] = set()
    with ledger.submitting(say):
        _recover(client, ledger, say)
        pending = ledger.pending_for(key for group in groups.values() for key in group[2])
        for (name, base, model_id), (provider, _model, lines) in groups.items():
            todo = {key: entry for key, entry in lines.items() if key not in pending}
            if not todo:
                continue
            size = min(settings.size or provider.max_requests, provider.max_requests)
            parts = list(split((line for _, line in todo.values()), size, provider.max_bytes))
            say(f"fieldeval batch: {len(todo)} request(s) of {model_id} to {name} in {len(parts)} batch(es), "
                f"{_estimate(client, model_id, [request for request, _ in todo.values()])}")
            keys = iter(todo)
            for part in parts:
                part_keys = [next(keys) for _ in part]
                batch_id = _create(client, ledger, provider, (name, base, model_id), part, part_keys, answers, say)
                if batch_id is not None:
                    created.add(batch_id)
                    pending.update(dict.fromkeys(part_keys, batch_id))
    return pending, created


def _create(client: Any, ledger: BatchLedger, provider: Any, where: tuple[str, str, str], part: list[bytes],
            keys: list[str], answers: BatchAnswers, say: Callable[[str], None]) -> str | None:
    """One batch, paid once: its intent recorded, a batch the provider already holds for the same requests
    adopted, else created with Ctrl-C and SIGTERM held until it is recorded; its id, or None (its items fail)."""
    name, base, model_id = where
    digest = request_set_digest(keys)

    def fail(detail: str, kind: str = "transient") -> None:
        for key in keys:
            answers.failed[key] = ModelCallError(model_id, detail, kind=kind)

    with _held_signals(say):
        try:
            intent = ledger.intend(digest, name, model_id, base, keys)
        except Exception as error:  # noqa: BLE001 - a full disk, a locked or damaged cache file: nothing sent
            say(f"fieldeval batch: the intent to submit {len(keys)} request(s) of {model_id} could not be recorded "
                f"in the response cache's ledger ({error}); nothing was submitted")
            fail(f"its batch could not be recorded before submitting ({error}); nothing was submitted")
            return None
        adopted = _adopt(client, ledger, provider, digest, model_id, say)
        if adopted is not None:
            try:
                ledger.confirm(intent, adopted)
            except Exception as error:  # noqa: BLE001 - the intent stays: the next session finds the batch again
                say(f"fieldeval batch: {adopted} could not be recorded in the response cache's ledger ({error}); "
                    "its intent stays there and the next session looks it up again")
                fail(f"its batch {adopted} could not be recorded ({error})")
                return None
            return adopted
        try:
            batch_id = provider.submit(part, model_id, digest)
        except CreationUnknown as unknown:
            batch_id = _look_up(ledger, provider, digest, model_id)
            if batch_id is None:
                if provider.searchable:  # the provider lists no such batch: nothing was created
                    ledger.drop(intent)
                    say(f"fieldeval batch: {name} did not answer the creation of a batch of {len(keys)} request(s) "
                        f"of {model_id} ({unknown.error.detail}) and lists none; run the command again")
                    fail(f"its batch was not created: {unknown.error.detail}")
                else:
                    line = _unsearchable(intent, name, model_id, len(keys), unknown.error.detail)
                    say(line)
                    fail(line.removeprefix("fieldeval batch: "))
                return None
        except Exception as error:  # noqa: BLE001 - refused, unreachable before the create: nothing was created
            ledger.drop(intent)
            error = classify(model_id, error) if not isinstance(error, ModelCallError) else error
            say(f"fieldeval batch: {name} refused a batch of {len(part)} request(s) of {model_id}: {error.detail}")
            fail(f"its batch was not accepted: {error.detail}", error.kind)
            return None
        try:
            ledger.confirm(intent, batch_id)
        except Exception as error:  # noqa: BLE001 - a full disk, a locked or damaged cache file
            _unrecorded(provider, batch_id, model_id, keys, error, answers, say)
            return None
    say(f"fieldeval batch: submitted {batch_id} ({len(part)} request(s))")
    return batch_id


def _adopt(client: Any, ledger: BatchLedger, provider: Any, digest: str, model_id: str,
           say: Callable[[str], None]) -> str | None:
    """A batch the provider already holds for this request set (created by a session whose ledger was lost, or
    whose create's answer was), still able to answer and not yet collected here; None when there is none, the
    provider cannot be searched, or ``--cache refresh`` asks for new answers."""
    if not provider.searchable or client.cache_mode == "refresh":
        return None
    found = _look_up(ledger, provider, digest, model_id)
    if found is not None:
        say(f"fieldeval batch: {found} at {provider.name} already holds these {model_id} requests; waiting for it "
            "instead of paying for them again")
    return found


def _look_up(ledger: BatchLedger, provider: Any, digest: str, model_id: str) -> str | None:
    """The newest batch at the provider made for ``digest`` that can still answer and was not collected here;
    None when there is none or the provider cannot be searched (or read)."""
    if not provider.searchable:
        return None
    try:
        found = provider.find(digest, model_id)
    except Exception:  # noqa: BLE001 - the provider cannot be read now: treated as not found, said by the caller
        return None
    collected = ledger.collected_ids()
    return next((batch_id for batch_id, state in found if state not in GONE and batch_id not in collected), None)


def _recover(client: Any, ledger: BatchLedger, say: Callable[[str], None]) -> None:
    """Settle the intents a session left when it was killed or lost a create's answer (the lock is held, so no
    live session is creating): found at the provider, the batch is recorded; listed nowhere, the intent is
    dropped and its requests are submitted again; at a provider that cannot be searched, it stays."""
    for record in ledger.batches(pending_only=True):
        if not record.intent:
            continue
        try:
            provider = provider_for(client.model(record.model))
        except Exception:  # noqa: BLE001 - no key, or the model is gone: the intent waits, as its batch would
            provider = None
        if provider is None or not provider.searchable or record.digest is None:
            continue
        try:
            found = provider.find(record.digest, record.model)
        except Exception as error:  # noqa: BLE001 - the provider cannot be read now: the next session tries again
            say(f"fieldeval batch: cannot look up the batch an earlier session was creating ({record.id}): "
                f"{classify(record.model, error).detail}; its requests wait")
            continue
        collected = ledger.collected_ids()
        live = [batch_id for batch_id, state in found if state not in GONE and batch_id not in collected]
        if live:
            ledger.confirm(record.id, live[0])
            say(f"fieldeval batch: found {live[0]} at {record.provider}, which an earlier session was creating "
                f"when it stopped; waiting for it instead of paying again")
        else:
            ledger.drop(record.id)
            say(f"fieldeval batch: the batch an earlier session was creating ({record.requests} request(s) of "
                f"{record.model}) was never created at {record.provider}; its requests are submitted now")


def _unsearchable(intent: str, provider: str, model_id: str, count: int, why: str) -> str:
    """The line for a create whose outcome cannot be known: the user checks, then forgets the intent."""
    return (f"fieldeval batch: {provider} did not answer the creation of a batch of {count} request(s) of {model_id} "
            f"({why}), and its batches cannot be searched by their requests, so fieldeval will not create it again "
            f"(that could pay twice): check the provider's console, cancel any duplicate there, then run "
            f"`fieldeval batches forget {intent}` to submit these requests again")


@contextlib.contextmanager
def _held_signals(say: Callable[[str], None]) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while a batch is created and recorded (main thread only): the first waits, with one
    line, and is delivered afterwards; one sent again after a second stops the create at once (its intent is
    then looked up by the next session)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, float]] = []

    def hold(signum: int, _frame: Any) -> None:
        now = time.monotonic()
        if held and now - held[0][1] >= 1.0:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        if not held:
            held.append((signum, now))
            say(f"fieldeval batch: {signal.Signals(signum).name} received while a batch is being created; it is "
                "recorded first so that it is never paid twice (send it again to stop at once)")

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0][0])


def _unrecorded(provider: Any, batch_id: str, model_id: str, keys: list[str], error: Exception,
                answers: BatchAnswers, say: Callable[[str], None]) -> None:
    """A created batch the ledger could not record: cancelled (a rerun would not know it and would submit its
    requests again, paying twice), and its requests' items failed with the reason."""
    try:
        provider.cancel(batch_id, model_id)
        done = "cancelled it"
    except Exception as cancel_error:  # noqa: BLE001 - said: the user cancels it at the provider
        done = f"could not cancel it either ({classify(model_id, cancel_error).detail}); cancel it at the provider"
    say(f"fieldeval batch: {batch_id} could not be recorded in the response cache's ledger ({error}); {done}, so "
        "it is not paid for twice; free the cache file's disk or lock and run the command again")
    for key in keys:
        answers.failed[key] = ModelCallError(model_id, f"its batch {batch_id} could not be recorded ({error})",
                                             kind="transient")


def _estimate(client: Any, model_id: str, requests: list) -> str:
    """The cost estimate said before a submission: at the batch price, and what it would cost live."""
    tokens_in = sum(math.ceil((len(r.prompt) + len(r.system or "")) / CHARS_PER_TOKEN) for r in requests)
    tokens_out = sum(r.options.get("max_tokens") or OUTPUT_TOKENS_GUESS for r in requests)
    batch = client.estimate_cost(model_id, tokens_in, tokens_out, batch=True)
    live = client.estimate_cost(model_id, tokens_in, tokens_out)
    if batch is None or live is None:
        return f"about {tokens_in} input and {tokens_out} output tokens (no price in [tool.fieldeval.prices])"
    return f"estimated {batch:.4f} USD at the batch price ({live:.4f} USD live)"


def _wait(client: Any, ledger: BatchLedger, batch_ids: set[str], settings: BatchSettings, answers: BatchAnswers,
          tries: Counter, say: Callable[[str], None], sleep: Callable[[float], None]) -> bool:
    """Wait for every batch, collecting each as it ends; False when ``--batch-max-wait`` ran out first."""
    records = {b.id: b for b in ledger.batches() if b.id in batch_ids}
    deadline = time.monotonic() + settings.max_wait_s
    pause = POLL_S
    seen: dict[str, tuple] = {}
    unread: dict[str, int] = {}  # looks in a row that got no usable answer, per batch
    while records:
        for batch_id, record in list(records.items()):
            if record.intent:  # a create whose outcome is unknown at a provider that cannot be searched
                _fail_batch(ledger, answers, record, _unsearchable(batch_id, record.provider, record.model,
                                                                   record.requests, "an earlier session stopped "
                                                                   "while creating it"), say)
                records.pop(batch_id)
                continue
            try:
                provider = provider_for(client.model(record.model))
            except Exception:  # noqa: BLE001 - no key, or the model is gone: its items wait, as below
                provider = None
            if provider is None:  # the model no longer reaches a batch API here: its items wait, unanswered
                for key in ledger.keys(batch_id):
                    answers.waiting.setdefault(key, batch_id)
                records.pop(batch_id)
                continue
            try:
                state = provider.state(batch_id, record.model)
                unread.pop(batch_id, None)
            except NotKnown as error:  # deleted, or another account's key: forgetting it is the user's call
                _fail_batch(ledger, answers, record,
                            f"fieldeval batch: {record.provider} does not know batch {batch_id} ({error.detail}); "
                            f"its {record.requests} request(s) wait for it until `fieldeval batches forget "
                            f"{batch_id}` lets them run as new (check first that the key is the account that "
                            "submitted it)", say)
                records.pop(batch_id)
                continue
            except Exception as error:  # noqa: BLE001 - classified: the provider may answer at the next poll
                error = classify(record.model, error)
                unread[batch_id] = unread.get(batch_id, 0) + 1
                if isinstance(error, TransientCallError) and unread[batch_id] < UNREAD_LIMIT:
                    continue
                say(f"fieldeval batch: {batch_id} cannot be read: {error.detail}")
                for key in ledger.keys(batch_id):
                    answers.failed.setdefault(key, ModelCallError(record.model, f"batch {batch_id}: {error.detail}",
                                                                  kind=error.kind))
                records.pop(batch_id)
                continue
            if seen.get(batch_id) != (state.state, state.succeeded, state.failed):
                seen[batch_id] = (state.state, state.succeeded, state.failed)
                say(f"fieldeval batch: {batch_id} ({record.provider}, {record.model}): {state.state}, "
                    f"{state.succeeded + state.failed}/{state.total or record.requests} done, {state.failed} failed")
            ledger.mark(batch_id, state.state)
            if state.ended:
                try:
                    _collect(client, ledger, provider, record, answers, tries)
                except (TransientCallError, ValueError, KeyError, TypeError, AttributeError):
                    continue  # its results could not be read this time: again at the next poll
                records.pop(batch_id)
        if not records:
            return True
        if client.stopped() or time.monotonic() + pause > deadline:
            return False
        _pause(client, pause, sleep)
        pause = min(pause * 1.5, POLL_MAX_S)
    return True


def _fail_batch(ledger: BatchLedger, answers: BatchAnswers, record: Any, line: str,
                say: Callable[[str], None]) -> None:
    """Say ``line`` once and fail every request of the recorded batch with it (a rerun says it again)."""
    say(line)
    for key in ledger.keys(record.id):
        answers.failed.setdefault(key, ModelCallError(record.model, line.removeprefix("fieldeval batch: "),
                                                      kind="transient"))


def _pause(client: Any, seconds: float, sleep: Callable[[float], None]) -> None:
    """Sleep ``seconds`` in short steps, ending early when the session stops (Ctrl-C, a cancelled CI job)."""
    end = time.monotonic() + seconds
    while not client.stopped() and (left := end - time.monotonic()) > 0:
        sleep(min(left, 0.25))


def _collect(client: Any, ledger: BatchLedger, provider: Any, record: Any, answers: BatchAnswers,
             tries: Counter) -> None:
    """Put an ended batch's answers in the cache and the session's answers; count its failed lines."""
    keys = ledger.keys(record.id)
    cache = client.cache if client.cache_mode in ("use", "refresh") else None
    resolved = client.model(record.model).model_id
    answered: set[str] = set()
    for key, outcome in provider.results(record.id, record.model):
        targets = keys if key == "*" else {key} & keys
        for target in targets:
            answered.add(target)
            if isinstance(outcome, Answer):
                response = CachedResponse(outcome.text, None, outcome.prompt_tokens, outcome.completion_tokens,
                                          batch=True)
                answers.answers[target] = response
                answers.failed.pop(target, None)
                if cache is not None:
                    cache.put(target, resolved, response)
            else:
                tries[target] += 1
                if isinstance(outcome, PermanentCallError) or tries[target] > client.retries:
                    answers.failed[target] = ModelCallError(  # one line refused: its item fails, not the model
                        record.model, f"no response after {tries[target]} batch request(s): {outcome.detail}",
                        kind="refused" if isinstance(outcome, PermanentCallError) else "transient")
    for key in keys - answered:  # a line the batch never reached (cancelled, expired): sent again next round
        tries[key] += 1
        if tries[key] > client.retries:
            answers.failed[key] = ModelCallError(record.model, f"no response after {tries[key]} batch request(s): "
                                                 f"the batch ended {ledger.get(record.id).state} before answering it",
                                                 kind="transient")
    if cache is not None:
        cache.flush()
    ledger.mark(record.id, ledger.get(record.id).state, collected=True)


__all__ = ["BatchAnswers", "BatchSettings", "run_batches"]
