"""``fieldeval batches list``, ``cancel ID`` and ``forget ID``: the batches a response cache has recorded."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from fieldeval.errors import UsageError

DEFAULT_CACHE = Path("reports") / "responses.sqlite"


def _ledger(args: argparse.Namespace):
    from fieldeval.calls.batches.ledger import BatchLedger

    path = Path(args.cache_path)
    if not path.is_file():
        raise UsageError(f"--cache-path {path}: no response cache there; pass the file a --batch session used "
                         f"(default: {DEFAULT_CACHE} under the project root)")
    try:  # read-only first: a file that is not a response cache is left as it was
        probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            probe.close()
        if "responses" not in tables:
            raise sqlite3.DatabaseError("it has no responses table")
        return BatchLedger(path)
    except sqlite3.DatabaseError as error:
        raise UsageError(f"--cache-path {path}: not a response cache ({error}); pass the file a --batch session "
                         "used") from None


def _recorded(ledger, args: argparse.Namespace, verb: str):
    """The ledger's record of ``args.batch_id``; one line naming the pending ones when there is none."""
    record = ledger.get(args.batch_id)
    if record is None:
        known = ", ".join(b.id for b in ledger.batches(pending_only=True)[:5]) or "none pending"
        raise UsageError(f"batches {verb} {args.batch_id!r}: no such batch in {args.cache_path} ({known}); "
                         "see `fieldeval batches list`")
    return record


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    ledger = _ledger(args)
    try:
        records = ledger.batches(pending_only=not args.all)
    finally:
        ledger.close()
    if args.json:
        print(json.dumps([record.__dict__ for record in records], indent=2))
        return 0
    if not records:
        print(f"no {'' if args.all else 'pending '}batches in {args.cache_path}")
        return 0
    table = Table(title=escape(f"{'' if args.all else 'pending '}batches in {args.cache_path}"), title_justify="left")
    for column in ("id", "provider", "model", "state", "requests", "submitted", "collected"):
        table.add_column(column, justify="right" if column == "requests" else "left", overflow="fold")
    for r in records:
        table.add_row(*(escape(str(v)) for v in (r.id, r.provider, r.model, r.state, r.requests, r.submitted_at,
                                                 "yes" if r.collected else "no")))
    Console().print(table)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from fieldeval.calls.batches.providers import NotKnown, provider_for
    from fieldeval.calls.failures import ModelCallError
    from fieldeval.calls.models import resolve_model
    from fieldeval.store.registry import use_session_store

    ledger = _ledger(args)
    try:
        record = _recorded(ledger, args, "cancel")
        if record.collected or record.state in ("cancelled", "canceled", "cancelling", "canceling", "ended",
                                                 "completed", "expired", "failed"):
            print(f"{record.id}: already {'collected' if record.collected else record.state}; nothing to cancel")
            return 0
        if record.intent:
            raise UsageError(f"batches cancel {record.id}: an intent whose creation was cut off has no batch id; "
                             f"check the provider's console, then `fieldeval batches forget {record.id}`")
        use_session_store(args.store)
        try:
            provider = provider_for(resolve_model(record.model, flag="the batch's model"))
        except UsageError:
            raise
        except Exception as error:  # noqa: BLE001 - a missing key, say
            raise UsageError(f"batches cancel {record.id}: {record.model}: {error}; set its key "
                             "(llm keys set openai / anthropic) and try again") from None
        if provider is None:
            raise UsageError(f"batches cancel {record.id}: its model {record.model} has no batch API here any more; "
                             "cancel it in the provider's console")
        try:
            provider.cancel(record.id, record.model)
        except NotKnown:  # the provider no longer has it: nothing to cancel, nothing to wait for
            ledger.forget(record.id)
            print(f"{record.id}: {record.provider} does not know it (HTTP 404); forgotten, so its "
                  f"{record.requests} request(s) run as new in the next --batch session")
            return 0
        except ModelCallError as error:
            raise UsageError(f"batches cancel {record.id}: {record.provider} refused ({error.detail})") from None
        ledger.mark(record.id, "cancelling")
    finally:
        use_session_store(None)
        ledger.close()
    print(f"{record.id}: cancelling at {record.provider}; the next --batch session collects the requests it "
          "answered (they are paid for) and submits the rest again")
    return 0


def _forget(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    try:
        record = _recorded(ledger, args, "forget")
        if record.collected:
            print(f"{record.id}: already {record.state if record.state == 'forgotten' else 'collected'}; "
                  "nothing to forget")
            return 0
        ledger.forget(record.id)
    finally:
        ledger.close()
    print(f"{record.id}: forgotten; its {record.requests} request(s) of {record.model} run as new in the next "
          "--batch session (if the provider still has the batch, cancel it there, or it is paid twice)")
    return 0


def register_cli(sub) -> None:
    """Add ``batches list``, ``batches cancel`` and ``batches forget`` to the ``fieldeval`` command."""
    batches = sub.add_parser("batches", help="the provider batches --batch sessions submitted")
    batch_sub = batches.add_subparsers(dest="batches_command", required=True)
    listing = batch_sub.add_parser("list", help="pending batches (with --all, every recorded one)")
    listing.add_argument("--all", action="store_true", help="also the collected and cancelled ones")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(func=_list)
    cancel = batch_sub.add_parser("cancel", help="stop a pending batch at its provider")
    cancel.add_argument("batch_id", metavar="ID", help="the batch's id, as `fieldeval batches list` shows it")
    cancel.set_defaults(func=_cancel)
    cancel.add_argument("--store", metavar="URL", default=None,
                        help="the run store whose registered endpoints the batch's model is (default: "
                             "$FIELDEVAL_STORE, else reports/fieldeval.db)")
    forget = batch_sub.add_parser("forget", help="stop waiting for a batch the provider no longer knows (or an "
                                  "interrupted creation you have checked); its requests run as new")
    forget.add_argument("batch_id", metavar="ID", help="the batch's id, as `fieldeval batches list` shows it")
    forget.set_defaults(func=_forget)
    for parser in (listing, cancel, forget):
        parser.add_argument("--cache-path", default=str(DEFAULT_CACHE), metavar="PATH",
                            help=f"the response cache the sessions used (default: {DEFAULT_CACHE})")


__all__ = ["register_cli"]
