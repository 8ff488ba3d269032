"""``fieldeval score ebs``, ``fieldeval generate ebs`` and ``fieldeval enums``."""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

from fieldeval.benchmark import CliGroups
from fieldeval.errors import UsageError
from fieldeval.inputs import check_output_dir, check_output_file, read_tsv_frame


def _score_ebs(args: argparse.Namespace) -> int:
    import pandas as pd

    from fieldeval.benchmarks.ebs.enums import load_enums
    from fieldeval.benchmarks.ebs.schema import slot_validator
    from fieldeval.benchmarks.ebs.tables import (_templates, check_results_columns, score_results, summary_lines,
                                                 write_scored)
    from fieldeval.ontology import load_index

    path = Path(args.results_tsv)
    if args.outdir:
        check_output_dir(args.outdir, what="-o")
    if not path.is_file():
        raise UsageError(f"RESULTS_TSV {path}: no such file; pass the results.tsv written by llm-matrix")
    try:
        df = read_tsv_frame(path, what="RESULTS_TSV", hint="pass the results.tsv written by llm-matrix")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise UsageError(f"RESULTS_TSV {path}: not a readable TSV ({error}); pass a tab-separated results table") from None
    enums = load_enums(Path(args.enum_dir) if args.enum_dir else None)
    check_results_columns(df.columns)  # before the (slower) ontology load
    index = load_index(args.ontology)
    index.prepare()  # what scoring looks up, built before the freeze, as the slot validators are
    slot_validator().prepare(_templates(df))
    # the imports, the table read, the index and the submission schema live to the end: no collection walks them
    # again (refcounting still frees them; not unfrozen after, which would have the collection at exit walk them)
    gc.freeze()
    scored = score_results(df, index=index, enums=enums)
    outdir = Path(args.outdir) if args.outdir else path.parent
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / "results_envo_scored.tsv"
    write_scored(scored, out)
    print(f"ontology: {index.version}")
    print("\n".join(summary_lines(scored)))
    print(f"\nwrote {out} ({len(scored)} rows)")
    return 0


def _generate_ebs(args: argparse.Namespace) -> int:
    import yaml

    from fieldeval.benchmarks.ebs.suite import generate_suite

    source = Path(args.source_tsv)
    check_output_file(args.output, what="-o")
    if not source.is_file():
        raise UsageError(f"SOURCE_TSV {source}: no such file; pass a TSV with the nine input slots and env_broad_scale")
    for flag, value in [("--per-category", args.per_category), ("--min-pool", args.min_pool)]:
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    suite, pools = generate_suite(source, per_category=args.per_category, min_pool=args.min_pool,
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

    from fieldeval.benchmarks.ebs.enums import SCHEMA_PACKAGE, write_enums

    for path in write_enums(Path(args.out)):
        print(f"wrote {path}")
    print(f"from {SCHEMA_PACKAGE} {version(SCHEMA_PACKAGE)}")
    return 0


def register_cli(groups: CliGroups) -> None:
    """Add ``fieldeval score ebs``, ``fieldeval generate ebs`` and ``fieldeval enums``."""
    s_ebs = groups.score.add_parser("ebs", help="ontology-aware env_broad_scale scores for an llm-matrix results.tsv")
    s_ebs.add_argument("results_tsv", metavar="RESULTS_TSV")
    s_ebs.add_argument("-o", "--output-dir", "--outdir", dest="outdir", metavar="OUTDIR",
                       help="output folder (default: the input's folder)")
    s_ebs.add_argument("--ontology", metavar="SELECTOR", help="oaklib selector (default: the pinned ENVO OBO)")
    s_ebs.add_argument("--enum-dir", metavar="DIR", help="value-set folder (default: enum_data/)")
    s_ebs.set_defaults(func=_score_ebs)

    g_ebs = groups.generate.add_parser("ebs", help="an env_broad_scale suite from a source TSV, by the upstream rules")
    g_ebs.add_argument("source_tsv", metavar="SOURCE_TSV")
    g_ebs.add_argument("-o", "--output", default="ebs-suite.yaml", help="suite YAML to write (default: ebs-suite.yaml)")
    g_ebs.add_argument("--per-category", type=int, default=10, help="cases sampled per stratum (default: 10)")
    g_ebs.add_argument("--min-pool", type=int, default=10, help="minimum unique rows for a stratum (default: 10)")
    g_ebs.add_argument("--seed", type=int, default=42, help="sampling seed (default: 42)")
    g_ebs.add_argument("--enum-dir", metavar="DIR", help="value-set folder (default: enum_data/)")
    g_ebs.add_argument("--model", action="append", help="model listed in the suite's matrix (repeatable)")
    g_ebs.set_defaults(func=_generate_ebs)

    enums = groups.top.add_parser("enums", help="write the env_broad_scale value sets from nmdc-submission-schema")
    enums.add_argument("--out", default="enum_data", help="folder to write (default: enum_data/ in the current folder)")
    enums.set_defaults(func=_enums)
