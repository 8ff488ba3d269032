"""``fieldeval audit BENCH [--json] [--strict]``: the findings in a benchmark's gold data."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from fieldeval.benchmark import Benchmark, Finding, benchmarks, get_benchmark


def audit_findings(bench: Benchmark, context: object) -> list[Finding]:
    """The benchmark's findings for a loaded context, as a list."""
    return list(bench.audit(context))


def finding_lines(name: str, findings: Sequence[Finding]) -> list[str]:
    """The findings as the terminal shows them: a header, then one line per finding."""
    if not findings:
        return [f"{name}: no gold-data findings"]
    lines = [f"{name}: {len(findings)} gold-data finding{'s' if len(findings) != 1 else ''}"]
    for finding in findings:
        shown = ", ".join(finding.cases[:10]) + (f", ... ({finding.count} in all)" if finding.count > 10 else "")
        lines += [f"  {finding.kind}: {finding.message}", f"    cases: {shown}"]
    return lines


def _audit(args: argparse.Namespace) -> int:
    bench = get_benchmark(args.benchmark)
    values = {f.name: getattr(args, f"audit_{f.name}") for f in bench.option_fields()}
    options = bench.options(**{name: value for name, value in values.items() if value is not None})
    findings = audit_findings(bench, bench.load(options))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        print("\n".join(finding_lines(bench.name, findings)))
    return 1 if args.strict and findings else 0


def _add_options(parser: argparse.ArgumentParser, bench: Benchmark) -> None:
    """The benchmark's own options (its data: ``--ebs-suite``, ``--ontology``, ``--ibf-corpus`` ...), as pytest names them."""
    for f in bench.option_fields():
        meta = f.metadata
        kind = meta.get("type") or (type(f.default) if f.default is not None else str)
        kwargs: dict = {"dest": f"audit_{f.name}", "default": None, "help": meta["help"]}
        if isinstance(f.default, bool):
            kwargs["action"] = "store_true"
        elif isinstance(f.default, tuple):
            kwargs["action"] = "append"
        else:
            kwargs.update(type=kind if kind in (int, float) else str, choices=meta.get("choices"),
                          metavar=meta.get("metavar"))
        parser.add_argument(meta["flag"], **kwargs)


def register_cli(sub: argparse._SubParsersAction) -> None:
    """Add ``fieldeval audit BENCH``: one subcommand per installed benchmark, with its data options."""
    audit = sub.add_parser("audit", help="find defects in a benchmark's gold data (exit 1 with --strict on any)")
    per_bench = audit.add_subparsers(dest="benchmark", required=True, metavar="BENCH")
    for name, bench in benchmarks().items():
        parser = per_bench.add_parser(name, help=f"audit the gold data of {bench.title}")
        parser.add_argument("--json", action="store_true", help="print the findings as JSON")
        parser.add_argument("--strict", action="store_true", help="exit 1 when there is any finding")
        _add_options(parser, bench)
        parser.set_defaults(func=_audit)
