"""The ``fieldeval`` command: scoring results tables, generating suites, writing value sets.

Every user mistake ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fieldeval.errors import UsageError


def _score_ebs(args: argparse.Namespace) -> int:
    import pandas as pd

    from fieldeval.benchmarks import ebs
    from fieldeval.ontology import load_index

    path = Path(args.results_tsv)
    if not path.is_file():
        raise UsageError(f"RESULTS_TSV {path}: no such file; pass the results.tsv written by llm-matrix")
    try:
        df = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise UsageError(f"RESULTS_TSV {path}: not a readable TSV ({error}); pass a tab-separated results table") from None
    enums = ebs.load_enums(Path(args.enum_dir) if args.enum_dir else None)
    ebs.check_results_columns(df.columns)  # before the (slower) ontology load
    index = load_index(args.ontology)
    scored = ebs.score_results(df, index=index, enums=enums)
    outdir = Path(args.outdir) if args.outdir else path.parent
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / "results_envo_scored.tsv"
    scored.to_csv(out, sep="\t", index=False)
    print(f"ontology: {index.version}")
    print("\n".join(ebs.summary_lines(scored)))
    print(f"\nwrote {out} ({len(scored)} rows)")
    return 0


def _generate_ebs(args: argparse.Namespace) -> int:
    import yaml

    from fieldeval.benchmarks import ebs

    source = Path(args.source_tsv)
    if not source.is_file():
        raise UsageError(f"SOURCE_TSV {source}: no such file; pass a TSV with the nine input slots and env_broad_scale")
    for flag, value in [("--per-category", args.per_category), ("--min-pool", args.min_pool)]:
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    suite, pools = ebs.generate_suite(source, per_category=args.per_category, min_pool=args.min_pool,
                                      seed=args.seed, enum_dir=Path(args.enum_dir) if args.enum_dir else None,
                                      models=args.model)
    for category, size in pools.items():
        state = "included" if size >= args.min_pool else "excluded"
        print(f"{size:5d}  {state:8s}  {category}")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        yaml.dump(suite, handle, default_flow_style=False, sort_keys=False, width=120, allow_unicode=True)
    print(f"wrote {len(suite['cases'])} cases to {out}")
    return 0


def _enums(args: argparse.Namespace) -> int:
    from importlib.metadata import version

    from fieldeval.benchmarks import ebs

    for path in ebs.write_enums(Path(args.out)):
        print(f"wrote {path}")
    print(f"from {ebs.SCHEMA_PACKAGE} {version(ebs.SCHEMA_PACKAGE)}")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as argparse does, but without the usage block
        self.exit(2, f"{self.prog}: {message}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="fieldeval", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    score = sub.add_parser("score", help="score a results table after the fact")
    score_sub = score.add_subparsers(dest="benchmark", required=True)
    s_ebs = score_sub.add_parser("ebs", help="ontology-aware env_broad_scale scores for an llm-matrix results.tsv")
    s_ebs.add_argument("results_tsv", metavar="RESULTS_TSV")
    s_ebs.add_argument("-o", "--outdir", metavar="OUTDIR", help="output folder (default: the input's folder)")
    s_ebs.add_argument("--ontology", metavar="SELECTOR", help="oaklib selector (default: the pinned ENVO OBO)")
    s_ebs.add_argument("--enum-dir", metavar="DIR", help="value-set folder (default: enum_data/)")
    s_ebs.set_defaults(func=_score_ebs)

    generate = sub.add_parser("generate", help="build a suite from source data")
    gen_sub = generate.add_subparsers(dest="benchmark", required=True)
    g_ebs = gen_sub.add_parser("ebs", help="an env_broad_scale suite from a source TSV, by the upstream rules")
    g_ebs.add_argument("source_tsv", metavar="SOURCE_TSV")
    g_ebs.add_argument("-o", "--output", default="ebs-suite.yaml", help="suite YAML to write (default: ebs-suite.yaml)")
    g_ebs.add_argument("--per-category", type=int, default=10, help="cases sampled per stratum (default: 10)")
    g_ebs.add_argument("--min-pool", type=int, default=10, help="minimum unique rows for a stratum (default: 10)")
    g_ebs.add_argument("--seed", type=int, default=42, help="sampling seed (default: 42)")
    g_ebs.add_argument("--enum-dir", metavar="DIR", help="value-set folder (default: enum_data/)")
    g_ebs.add_argument("--model", action="append", help="model listed in the suite's matrix (repeatable)")
    g_ebs.set_defaults(func=_generate_ebs)

    enums = sub.add_parser("enums", help="write the env_broad_scale value sets from nmdc-submission-schema")
    enums.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "enum_data"),
                       help="folder to write (default: enum_data/)")
    enums.set_defaults(func=_enums)

    for register in _extensions():
        register(sub, score_sub)
    from fieldeval.service import register_cli as register_service_cli
    from fieldeval.store_cli import register_cli

    register_cli(sub)
    register_service_cli(sub)
    return parser


def _extensions():
    """Subcommands contributed by other engine modules: ``register(sub, score_sub)`` functions."""
    from fieldeval.benchmarks import BENCHMARKS

    for module in BENCHMARKS.values():
        hook = getattr(module, "register_cli", None)
        if hook is not None:
            yield hook


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as error:
        print(f"fieldeval: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fieldeval: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
