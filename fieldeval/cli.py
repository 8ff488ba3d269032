"""The ``fieldeval`` command: each benchmark's commands (``score``, ``generate``, ...) and the run store's.

Every user mistake ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fieldeval.benchmark import CliGroups, benchmarks
from fieldeval.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as argparse does, but without the usage block
        self.exit(2, f"{self.prog}: {message}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="fieldeval", description=__doc__.splitlines()[0].replace("``", ""))  # no RST in help
    sub = parser.add_subparsers(dest="command", required=True)

    groups = CliGroups(
        score=sub.add_parser("score", help="score a results table after the fact").add_subparsers(
            dest="benchmark", required=True),
        generate=sub.add_parser("generate", help="build a suite from source data").add_subparsers(
            dest="benchmark", required=True),
        top=sub,
    )
    for bench in benchmarks().values():
        if bench.register_cli is not None:
            bench.register_cli(groups)
    from fieldeval.service import register_cli as register_service_cli
    from fieldeval.store.cli import register_cli

    from fieldeval.stats.power import register_cli as register_power_cli

    register_cli(sub)
    register_power_cli(sub)
    from fieldeval.audit_cli import register_cli as register_audit_cli

    register_audit_cli(sub)
    register_service_cli(sub)
    from fieldeval.calls.batches.cli import register_cli as register_batches_cli

    register_batches_cli(sub)
    return parser


VALUES_WITH_A_DASH = ("--sort",)  # options whose value may start with "-" (``--sort -ontology_score``)


def _joined(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--sort -COL`` written ``--sort=-COL``, which argparse would otherwise read as two options."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in VALUES_WITH_A_DASH and arg.startswith("-") and not arg.startswith("--"):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(_joined(sys.argv[1:] if argv is None else argv))
    from fieldeval.stats.threads import one_blas_thread

    try:
        with one_blas_thread():
            return args.func(args)
    except UsageError as error:
        print(f"fieldeval: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fieldeval: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
