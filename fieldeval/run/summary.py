"""The terminal summary table of a run's headline metrics, and its Markdown twin.

Model names, labels and run ids are data: rich never reads them as markup, and
in Markdown ``|`` cannot end a cell nor ``<script>`` become HTML.
"""

from __future__ import annotations

import html
import io

from fieldeval.benchmark import benchmarks
from fieldeval.stats import FEW_CLUSTERS, few_clusters
from fieldeval.stats.wording import clustered, interval_names, span


def markdown_cell(value: object) -> str:
    r"""Text for a GitHub Markdown table cell or line: HTML escaped, ``|`` as ``\|``, one line.

    Example:
        >>> markdown_cell("a|b <script>")
        'a\\|b &lt;script&gt;'
    """
    text = html.escape(" ".join(str(value).split()), quote=False)
    return text.replace("|", "\\|")


def format_metric(entry: dict | None) -> str:
    """``0.812 (0.750-0.870)`` for a metric entry; with clusters ``0.855 (0.242-1.000; 0.805-0.898)``, its
    interval on new clusters then on more samples from these clusters (:func:`interval_legend` names them);
    ``-`` when empty."""
    if not entry or entry.get("value") is None:
        return "-"
    text = f"{entry['value']:.3f} ({span(entry['ci95'])}"
    if clustered(entry) and "ci95_within" in entry:
        text += f"; {span(entry['ci95_within'])}"
    return text + ")"


def interval_legend(name: str, models: dict) -> list[str]:
    """The line under a benchmark's table that names the question each interval answers, e.g. ``ebs intervals:
    first on new studies (6 studies: approximate), second on more samples from these 6 studies`` (the counts of
    the metric over the most items; one line per model where the models' counts differ)."""
    bench = benchmarks()[name]
    seen: dict[tuple[str, str], list[str]] = {}
    for model, entry in models.items():
        named = [entry[m] for m in bench.headline if clustered(entry.get(m)) and "ci95_within" in entry[m]]
        if named:
            widest = max(named, key=lambda e: (e["n"], e["n_clusters"]))
            seen.setdefault(interval_names(widest, bench.clusters_called), []).append(model)
    lines = []
    for (new, within), whose in seen.items():
        models_named = f" ({', '.join(whose)})" if len(seen) > 1 else ""
        lines.append(f"{name} intervals{models_named}: first {new}, second {within}")
    return lines


def format_difference(diff: dict, key: str = "ci95") -> str:
    """``+0.042 (-0.010 to +0.090)`` for a paired difference (its ``key`` interval), ``*`` when its Holm-adjusted
    p is below 0.05."""
    from fieldeval.stats.paired import significant

    if diff.get("value") is None:
        return "-"
    lo, hi = diff.get(key) or diff["ci95"]
    if lo is None or hi is None:
        return f"{diff['value']:+.3f} (-)"
    return f"{diff['value']:+.3f} ({lo:+.3f} to {hi:+.3f})" + (" *" if significant(diff) else "")


def few_cluster_notes(name: str, models: dict) -> list[str]:
    """One line per model whose headline intervals rest on fewer than 10 clusters."""
    lines = []
    for model, entry in models.items():
        thin = [(entry[m]["n"], entry[m]["n_clusters"]) for m in benchmarks()[name].headline
                if few_clusters(entry.get(m))]
        if thin:
            items, clusters = max(thin)  # the metric over the most items
            called = benchmarks()[name].clusters_called
            lines.append(f"{name} {model}: {items} items in only {clusters} {called} (under {FEW_CLUSTERS}): the "
                         f"intervals on new {called} are wide and approximate")
    return lines


def format_p(p: float | None) -> str:
    """A p-value for a table: ``0.012``, ``<0.001``, or ``-``."""
    return "-" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def difference_lines(payload: dict) -> list[str]:
    """``this run - baseline`` per headline metric, one line each, then the pairing notes."""
    baseline = payload.get("baseline") or {}
    lines = [f"{d['benchmark']}.{d['metric']} {d['model']}: {format_difference(d)} vs baseline {baseline['run']} "
             f"(on more samples from these clusters {span(d.get('ci95_within'), sign=True)}; p {format_p(d.get('p_value'))}, "
             f"Holm {format_p(d.get('p_holm'))}; {d['n_items']} items, {d['n_clusters']} clusters)"
             for d in baseline.get("differences", [])]
    return lines + list(baseline.get("notes", []))


def gate_line(gate: dict) -> str:
    """One line per gate result, passed or failed, e.g. ``passed gate ebs.ontology_score for m: lower value 0.842 >= 0.8``
    or ``FAILED gate errors: the run is partial: 3 of 100 planned items errored or missing (at most 0 allowed; ...)``."""
    head = f"gate {gate['metric']}" + (f" for {gate['model']}" if gate["model"] != "-" else "")
    if gate["gate_on"] == "baseline":
        from fieldeval.stats.paired import regression_line

        if not gate["passed"]:
            return regression_line(gate)
        lo, hi = gate["ci95"]
        if gate.get("value") is None or lo is None or hi is None:
            return f"passed {head}: no paired interval against baseline run {gate['baseline_run']}"
        if gate.get("p_holm") is None:
            return (f"passed {head}: {gate['value']:+.3f} (paired ci95 {lo:+.3f} to {hi:+.3f}) against baseline run "
                    f"{gate['baseline_run']}, not entirely below -{abs(gate['threshold']):g}")
        return (f"passed {head}: {gate['value']:+.3f} (paired ci95 {lo:+.3f} to {hi:+.3f}) against baseline run "
                f"{gate['baseline_run']}: no drop beyond -{abs(gate['threshold']):g} (one-sided p "
                f"{gate['p_value']:.3g}, Holm-adjusted {gate['p_holm']:.3g} over {gate['family']} comparisons)")
    if gate.get("reason"):
        return f"FAILED {head}: {gate['reason']}"
    value = f"{gate['gate_on']} value {round(gate['value'], 3):g}"
    if gate["passed"]:
        return f"passed {head}: {value} >= {gate['threshold']:g}"
    return f"FAILED {head}: {value} is below the threshold {gate['threshold']:g}"


def time_line(payload: dict) -> str:
    """The session's wall time beside its calls' summed time (calls in flight at once overlap, so the sum can
    exceed the span; cached items keep their first call's time).

    Example:
        >>> time_line({"wall_s": 410.2, "benchmarks": {"ibf": {"m": {"totals": {"response_time_s": 3149.7}}}}})
        'time: 410 s start to end; model calls 3150 s summed (they overlap; a cached item counts its first call)'
    """
    calls = [entry.get("totals", {}).get("response_time_s") for models in payload["benchmarks"].values()
             for entry in models.values()]
    known = [value for value in calls if value is not None]
    line = f"time: {payload['wall_s']:.0f} s start to end"
    if known:
        line += f"; model calls {sum(known):.0f} s summed (they overlap; a cached item counts its first call)"
    return line


def render_summary(payload: dict, *, width: int = 200) -> str:
    """One rich table per benchmark: headline metrics as rows, one column per model, value (ci95).

    Tables take their natural width (never truncated); ``width`` only caps it.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    console.print(escape(f"fieldeval run {payload['run_id']}  ontology: {payload.get('ontology_version') or '-'}"))
    for name, models in payload["benchmarks"].items():
        bench = benchmarks()[name]
        title = ("value (ci95 on new " + bench.clusters_called + "; on more samples from these)"
                 if interval_legend(name, models) else "value (ci95 lo-hi)")
        table = Table(title=f"{name}: {title}", title_justify="left")
        table.add_column("metric", no_wrap=True)
        for model in models:
            table.add_column(escape(model), justify="right", no_wrap=True)
        table.add_row("items", *(str(entry["items"]) for entry in models.values()))
        table.add_row("errors", *(str(entry["errors"]) for entry in models.values()), end_section=True)
        for metric in bench.headline:
            table.add_row(metric, *(format_metric(entry.get(metric)) for entry in models.values()))
        console.print(table)
        for line in interval_legend(name, models) + bench.summary_notes(models) + few_cluster_notes(name, models):
            console.print(escape(line))
    if payload.get("wall_s") is not None:
        console.print(escape(time_line(payload)))
    if payload.get("tied_with_best"):
        from fieldeval.stats.ranking import tied_line

        for bench, ranking in payload["tied_with_best"].items():
            console.print(escape(tied_line(bench, ranking)))
    if payload.get("baseline"):
        from fieldeval.stats.paired import family_size

        family = family_size(payload["baseline"].get("differences", []))
        console.print(escape(f"paired differences, this run - baseline run {payload['baseline']['run']} "
                             f"(ci95 on new clusters; * Holm-adjusted p < 0.05 over {family} comparisons):"))
        for line in difference_lines(payload):
            console.print(escape(f"  {line}"))
    return buffer.getvalue()


def render_markdown(payload: dict) -> str:
    """The run's headline metrics and gates as GitHub-flavoured Markdown."""
    lines = [f"## fieldeval run {markdown_cell(payload['run_id'])}", ""]
    if payload.get("status") == "partial":
        lines += ["**partial run**: some planned items errored; its metrics cover only the scored items.", ""]
    if payload.get("ontology_version"):
        lines += [f"Ontology: {markdown_cell(payload['ontology_version'])}", ""]
    for name, models in payload["benchmarks"].items():
        headline = benchmarks()[name].headline
        lines += [f"### {name}", "", "| model | items | errors | " + " | ".join(headline) + " |",
                  "|---|---:|---:|" + "---:|" * len(headline)]
        for model, entry in models.items():
            cells = [format_metric(entry.get(metric)) for metric in headline]
            lines.append(f"| {markdown_cell(model)} | {entry['items']} | {entry['errors']} | " + " | ".join(cells) + " |")
        lines.append("")
        notes = interval_legend(name, models) + few_cluster_notes(name, models)
        if notes:
            lines += [f"> {markdown_cell(note)}" for note in notes] + [""]
    from fieldeval.stats.epochs import epoch_lines

    repeats = epoch_lines(payload)
    if repeats:
        lines += [f"> {markdown_cell(line)}" for line in repeats] + [""]
    if payload.get("baseline"):
        baseline = payload["baseline"]
        from fieldeval.stats.paired import family_size

        lines += [f"### Against baseline run {markdown_cell(baseline['run'])}", "",
                  f"{family_size(baseline['differences'])} comparisons; * marks a Holm-adjusted p below 0.05.", "",
                  "| metric | model | this run - baseline (ci95 on new clusters) | on more samples from these | "
                  "p (Holm) | items | clusters |", "|---|---|---:|---:|---:|---:|---:|"]
        for d in baseline["differences"]:
            lines.append(f"| {d['benchmark']}.{d['metric']} | {markdown_cell(d['model'])} | {format_difference(d)} | "
                         f"{span(d.get('ci95_within'), sign=True)} | {format_p(d.get('p_holm'))} | "
                         f"{d['n_items']} | {d['n_clusters']} |")
        lines += [""] + [markdown_cell(note) for note in baseline.get("notes", [])] + [""]
    if payload.get("gates"):
        lines += ["### Gates", "", "| gate | model | value | threshold | result |", "|---|---|---:|---:|---|"]
        for gate in payload["gates"]:
            value = "-" if gate["value"] is None else (
                format_difference(gate) if gate.get("ci95") else
                str(gate["value"]) if gate["gate_on"] == "count" else f"{gate['value']:.3f}")
            lines.append(f"| {gate['metric']} ({gate['gate_on']}) | {markdown_cell(gate['model'])} | {value} | "
                         f"{gate['threshold']} | {'pass' if gate['passed'] else '**FAIL**'} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def unmatched_line(entry: dict) -> str:
    """The line for thresholds whose model no run has and no llm model answers to.

    Example:
        >>> line = unmatched_line({"model": "gpt-4o-mni", "gates": ["ibf.mdS"], "models_run": ["gpt-4o-mini"]})
        >>> line.startswith("thresholds of 'gpt-4o-mni' (ibf.mdS) were not checked: no model")
        True
    """
    return (f"thresholds of {entry['model']!r} ({', '.join(entry['gates'])}) were not checked: no model of this run "
            f"nor any llm model answers to that name (this run's models: {', '.join(entry['models_run']) or 'none'}); "
            f'fix the name of [tool.fieldeval.thresholds."{entry["model"]}"]')


def terminal_lines(payload: dict, error_lines: list[str]) -> list[tuple[str, dict[str, bool]]]:
    """What the terminal shows at a run's end, each line with its markup: the headline tables, the epochs' lines,
    every gate (passed ones too, so a reader sees what was checked), the gold data's findings, the errors."""
    from fieldeval.run.audit import audit_lines
    from fieldeval.stats.epochs import epoch_lines

    lines: list[tuple[str, dict[str, bool]]] = [(line, {}) for line in render_summary(payload).splitlines()]
    lines += [(line, {}) for line in epoch_lines(payload)]
    lines += [(gate_line(gate), {"red": not gate["passed"], "green": gate["passed"]}) for gate in payload["gates"]]
    lines += [(unmatched_line(entry), {"yellow": True}) for entry in payload.get("unmatched_thresholds", [])]
    lines += [(line, {"yellow": True}) for line in audit_lines(payload.get("audit", {}))]
    lines += [(line, {"red": True}) for line in error_lines]
    from fieldeval.store.shell import visible

    return [(visible(line), markup) for line, markup in lines]  # a provider's or model's words never reach it raw
