// fieldeval dashboard: filters, run selection, sortable tables, Plotly charts, live status.
// Every text from a run reaches the page through textContent or Plotly with entities escaped.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("fieldeval-data").textContent);
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const name = (e) => esc(e.model + " · " + e.run_id + (e.label ? " · " + e.label : ""));
  const plot = (id, traces, layout) => {
    const el = typeof id === "string" ? document.getElementById(id) : id;
    if (el && window.Plotly) Plotly.react(el, traces, Object.assign({margin: {t: 40}}, layout), {displaylogo: false, responsive: true});
  };

  function selectedRuns() {
    const runs = new Set();
    $$("#runs-table tbody tr[data-run]").forEach((row) => {
      const box = $(".select-run", row);
      if (!row.classList.contains("hidden") && box && box.checked) runs.add(row.dataset.run);
    });
    return runs;
  }

  function applyFilters() {
    const want = {benchmarks: $("#filter-benchmark").value, models: $("#filter-model").value,
                  corpus: $("#filter-corpus").value};
    const label = $("#filter-label").value.toLowerCase();
    $$("#runs-table tbody tr[data-run]").forEach((row) => {
      let show = Object.entries(want).every(([key, value]) => !value || row.dataset[key].split("\n").includes(value));
      show = show && (!label || row.dataset.label.toLowerCase().includes(label));
      row.classList.toggle("hidden", !show);
    });
    const runs = selectedRuns();
    const corpus = want.corpus;
    $$("[data-run]:not(#runs-table tr)").forEach((el) => {
      const show = runs.has(el.dataset.run) && (!corpus || el.dataset.corpus === corpus);
      el.classList.toggle("hidden", !show);
    });
    draw(runs, corpus);
  }

  const shown = (entries, runs, corpus) => entries.filter((e) => runs.has(e.run_id) && (!corpus || e.corpus_version === corpus));

  function draw(runs, corpus) {
    const ibf = shown(data.ibf, runs, corpus);
    if (document.getElementById("ibf-radar")) {
      const axis = data.dimensions.map((d) => d.replace(/_/g, " "));
      plot("ibf-radar", ibf.map((e) => {
        const r = data.dimensions.map((d) => e.scores[d].value);
        const text = data.dimensions.map((d) => {
          const m = e.scores[d];
          return m.lo === null ? "" : "ci95 " + m.lo.toFixed(2) + "–" + m.hi.toFixed(2);
        });
        return {type: "scatterpolar", r: r.concat([r[0]]), theta: axis.concat([axis[0]]), text: text.concat([text[0]]),
                fill: "toself", opacity: 0.6, name: name(e), hovertemplate: "%{theta}: %{r:.2f}<br>%{text}<extra>%{fullData.name}</extra>"};
      }), {polar: {radialaxis: {range: [0, 4]}}, title: {text: "IBF dimensions, one polygon per run and model"}, showlegend: true});
    }
    const ebs = shown(data.ebs, runs, corpus);
    if (document.getElementById("ebs-strata")) {
      plot("ebs-strata", ebs.map((e) => {
        const strata = Object.keys(e.per_stratum);
        const m = strata.map((s) => e.per_stratum[s].ontology_score);
        return {type: "bar", name: name(e), x: strata.map(esc), y: m.map((v) => v.value),
                error_y: {type: "data", symmetric: false, array: m.map((v) => v.hi === null ? 0 : v.hi - v.value),
                          arrayminus: m.map((v) => v.lo === null ? 0 : v.value - v.lo)}};
      }), {barmode: "group", title: {text: "EBS ontology score per stratum (ci95 bars)"}, yaxis: {range: [0, 1]}});
      plot("ebs-relationships", data.relationships.map((rel) => ({
        type: "bar", name: rel, x: ebs.map(name), y: ebs.map((e) => e.relationships[rel])})),
        {barmode: "stack", title: {text: "EBS relationship to the expected term (items)"}});
    }
    const mrel = shown(data.microbiorel, runs, corpus);
    if (document.getElementById("mrel-f1")) {
      plot("mrel-f1", mrel.map((e) => {
        const classes = Object.keys(e.per_class);
        return {type: "bar", name: name(e), x: classes.map(esc), y: classes.map((c) => e.per_class[c].f1),
                customdata: classes.map((c) => e.per_class[c].support), hovertemplate: "%{x}: F1 %{y:.3f}, support %{customdata}"};
      }), {barmode: "group", title: {text: "MicrobioRel per-class F1"}, yaxis: {range: [0, 1]}});
      $$(".confusion").forEach((el) => {
        const e = data.microbiorel.find((x) => x.key === el.dataset.key);
        if (!e || el.closest(".hidden")) return;
        plot(el, [{type: "heatmap", z: e.confusion.matrix, x: e.confusion.columns.map(esc), y: e.confusion.labels.map(esc),
                   colorscale: "Blues", hovertemplate: "gold %{y}, predicted %{x}: %{z}<extra></extra>"}],
             {title: {text: "confusion matrix: " + name(e)}, xaxis: {title: {text: "predicted"}}, yaxis: {title: {text: "gold"}, autorange: "reversed"}});
      });
    }
  }

  function sortBy(th) {
    const table = th.closest("table");
    const index = Array.from(th.parentNode.children).indexOf(th);
    const descending = th.getAttribute("aria-sort") !== "descending";
    $$("th", table).forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
    const numeric = th.dataset.type === "num";
    const key = (row) => {
      const raw = row.children[index].dataset.value;
      if (!numeric) return raw || "";
      return raw === "" || raw === undefined ? -Infinity : parseFloat(raw);
    };
    const body = $("tbody", table);
    const rows = $$("tr", body).sort((a, b) => {
      const x = key(a), y = key(b);
      const order = x < y ? -1 : x > y ? 1 : 0;
      return descending ? -order : order;
    });
    rows.forEach((row) => body.appendChild(row));
  }

  async function poll() {
    let runs;
    try {
      const answer = await fetch("/api/evaluations", {cache: "no-store"});
      if (!answer.ok) return;
      runs = await answer.json();
    } catch (error) { return; }
    const known = new Map(data.runs.map((r) => [r.run_id, r.status]));
    let reload = false;
    runs.forEach((run) => {
      const row = $('#runs-table tr[data-run="' + CSS.escape(run.run_id) + '"]');
      if (!row) { reload = true; return; }
      const status = $(".status", row);
      status.textContent = run.status;
      status.className = "status status-" + run.status;
      $(".progress", row).textContent = (run.status === "queued" || run.status === "running")
        ? (run.done || 0) + "/" + (run.total_items === null ? "?" : run.total_items)
        : (run.total_items === null ? "-" : String(run.total_items));
      if (known.get(run.run_id) !== run.status && (run.status === "completed" || known.get(run.run_id) === undefined)) reload = true;
      known.set(run.run_id, run.status);
    });
    if (reload) window.location.reload();
  }

  $$("th.sortable").forEach((th) => th.addEventListener("click", () => sortBy(th)));
  $$(".filters input").forEach((el) => el.addEventListener("input", applyFilters));
  $$(".filters select, .select-run").forEach((el) => el.addEventListener("change", applyFilters));
  applyFilters();
  if (data.live) setInterval(poll, 2000);
})();
