// fieldeval dashboard: filters, run selection, sortable tables, Plotly charts, live status, the evaluation form.
// Every text from a run reaches the page through textContent or Plotly with entities escaped.
// One colour per run (and model) in every chart; every charted value carries its ci95.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("fieldeval-data").textContent);
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const words = (s) => String(s).replace(/_/g, " ");
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#7b4173"];
  const colour = (e) => PALETTE[(data.colours[e.key] || 0) % PALETTE.length];
  const label = (e) => e.model + " · " + e.run_id + (e.label ? " · " + e.label : "");
  const name = (e) => esc(label(e));
  const narrow = () => window.innerWidth < 600;

  function layout(title, xTitle, yTitle, extra) {
    return Object.assign({
      title: {text: esc(title), x: 0, xanchor: "left", font: {size: 15}},
      margin: {t: 48, r: 12, b: 12, l: 12}, showlegend: false, bargap: 0.25,
      xaxis: {title: {text: esc(xTitle)}, automargin: true, tickangle: narrow() ? -60 : "auto"},
      yaxis: {title: {text: esc(yTitle)}, automargin: true},
    }, extra || {});
  }

  const plot = (el, traces, lay) => {
    if (el && window.Plotly) Plotly.react(el, traces, lay, {displayModeBar: false, responsive: true});
  };

  const has = (x) => x !== null && x !== undefined;
  const ci = (m, digits) => (m && has(m.lo) && has(m.hi) ? m.lo.toFixed(digits || 3) + "–" + m.hi.toFixed(digits || 3) : "-");

  function errorBars(values) {
    return {type: "data", symmetric: false, visible: true, color: "#333", thickness: 1.2, width: 3,
            array: values.map((m) => (m && has(m.hi) && has(m.value) ? m.hi - m.value : 0)),
            arrayminus: values.map((m) => (m && has(m.lo) && has(m.value) ? m.value - m.lo : 0))};
  }

  function bars(e, categories, values, hoverUnit) {
    return {type: "bar", name: name(e), x: categories.map((c) => esc(words(c))), marker: {color: colour(e)},
            y: values.map((m) => (m && has(m.value) ? m.value : 0)), error_y: errorBars(values),
            text: values.map((m) => (m && !has(m.value) ? (e.errors ? "errored: no score" : "no score") : "")),
            textposition: "outside", cliponaxis: false, constraintext: "none", textangle: -90,
            textfont: {color: "#b00020", size: 11},
            customdata: values.map((m) => ci(m)),
            hovertemplate: "%{x}: %{y:.3f} (ci95 %{customdata})" + (hoverUnit || "") + "<extra>%{fullData.name}</extra>"};
  }

  function selectedRuns() {
    const runs = new Set();
    $$("#runs-table tbody tr[data-run]").forEach((row) => {
      const box = $(".select-run", row);
      if (!row.classList.contains("hidden") && box && box.checked) runs.add(row.dataset.run);
    });
    // a shard is not drawn while its merged run is: the merged run holds the same items
    $$("#runs-table tbody tr[data-shard-of]").forEach((row) => {
      if (runs.has(row.dataset.shardOf)) runs.delete(row.dataset.run);
    });
    return runs;
  }

  function applyFilters() {
    const want = {benchmarks: $("#filter-benchmark").value, models: $("#filter-model").value,
                  corpus: $("#filter-corpus").value};
    const text = $("#filter-label").value.toLowerCase();
    $$("#runs-table tbody tr[data-run]").forEach((row) => {
      let show = Object.entries(want).every(([key, value]) => !value || row.dataset[key].split("\n").includes(value));
      show = show && (!text || row.dataset.label.toLowerCase().includes(text));
      row.classList.toggle("hidden", !show);
    });
    const runs = selectedRuns();
    const corpus = want.corpus;
    $$("[data-run]:not(#runs-table tr)").forEach((el) => {
      el.classList.toggle("hidden", !(runs.has(el.dataset.run) && (!corpus || el.dataset.corpus === corpus)));
    });
    draw(runs, corpus);
  }

  function swatches() {
    $$(".swatch[data-key]").forEach((el) => { el.style.background = colour({key: el.dataset.key}); });
  }

  function legends(bench, entries) {
    $$('ul.legend[data-bench="' + CSS.escape(bench) + '"]').forEach((ul) => {
      ul.textContent = "";
      entries.forEach((e) => {
        const li = document.createElement("li");
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = colour(e);
        li.appendChild(swatch);
        li.appendChild(document.createTextNode(label(e)));
        if (e.errors) {
          const mark = document.createElement("span");
          mark.className = "errored-badge";
          mark.textContent = "⚠ " + e.errors + " errored";
          li.appendChild(mark);
        }
        ul.appendChild(li);
      });
    });
  }

  function drawChart(bench, chart, index, entries) {
    const el = $('[data-bench="' + CSS.escape(bench.name) + '"][data-chart="' + index + '"]:not(.matrix)');
    if (chart.kind === "matrix") {
      $$('.matrix[data-bench="' + CSS.escape(bench.name) + '"]').forEach((box) => {
        const e = entries.find((x) => x.key === box.dataset.key);
        if (!e) return;
        const m = e.charts[index];
        plot(box, [{type: "heatmap", z: m.matrix, x: m.columns.map((c) => esc(words(c))), y: m.labels.map((c) => esc(words(c))),
                    colorscale: "Blues", reversescale: true, colorbar: {thickness: 12, title: {text: "items"}},
                    hovertemplate: "gold %{y}, predicted %{x}: %{z}<extra></extra>"}],
             layout(chart.title, chart.x_title, chart.y_title,  // the run is named in the caption above
                    {yaxis: {title: {text: esc(chart.y_title)}, automargin: true, autorange: "reversed", dtick: 1},
                     xaxis: {title: {text: esc(chart.x_title)}, automargin: true, tickangle: -60,
                             dtick: narrow() ? 2 : 1, tickfont: {size: narrow() ? 9 : 11}}}));
      });
      return;
    }
    if (!el) return;
    if (chart.kind === "radar") {
      const axis = chart.metrics.map((m) => words(m).replace(/ /g, "<br>"));  // two short lines: never cut
      plot(el, entries.map((e) => {
        const values = chart.metrics.map((m) => e.charts[index][m]);
        const r = values.map((m) => m.value);
        const cis = values.map((m) => ci(m, 2));
        return {type: "scatterpolar", r: r.concat([r[0]]), theta: axis.concat([axis[0]]), customdata: cis.concat([cis[0]]),
                fill: "toself", opacity: 0.55, name: name(e), line: {color: colour(e)}, marker: {color: colour(e)},
                hovertemplate: "%{theta}: %{r:.2f} (ci95 %{customdata})<extra>%{fullData.name}</extra>"};
      }), {title: {text: esc(chart.title), x: 0, xanchor: "left", font: {size: 15}}, showlegend: false,
           margin: narrow() ? {t: 60, r: 60, b: 40, l: 60} : {t: 60, r: 80, b: 40, l: 80},
           polar: {radialaxis: {range: [chart.low, chart.high], title: {text: "score"}, angle: 90, tickangle: 90},
                   angularaxis: {tickfont: {size: narrow() ? 10 : 12}}}});
      return;
    }
    const key = (e) => e.charts[index];
    const categories = Array.from(new Set(entries.flatMap((e) => Object.keys(key(e)))));
    plot(el, entries.map((e) => {
      const values = categories.map((c) => key(e)[c] || null);
      const trace = bars(e, categories, values);
      if (chart.kind === "classes") {
        trace.customdata = values.map((m) => (m ? ci(m) + ", support " + m.support : "-"));
      }
      if (chart.kind === "shares") {
        trace.customdata = values.map((m) => (m ? ci(m) + ", " + m.count + " items" : "-"));
      }
      return trace;
    }), layout(chart.title, chart.x_title, chart.y_title,
               {barmode: "group", yaxis: {title: {text: esc(chart.y_title)}, automargin: true, range: [chart.low, chart.high * 1.08]}}));
  }

  function draw(runs, corpus) {
    data.benchmarks.forEach((bench) => {
      const entries = (data.entries[bench.name] || []).filter((e) => runs.has(e.run_id) && (!corpus || e.corpus_version === corpus));
      legends(bench.name, entries);
      const heads = bench.headline;
      if (heads.length) {
        plot(document.getElementById(bench.name + "-headline"), entries.map((e) => bars(e, heads.map((h) => h.name),
          heads.map((h) => e.metrics[h.name]))),
          layout(bench.name + ": headline metrics across runs (ci95 bars)", "metric", "value",
                 {barmode: "group", yaxis: {title: {text: "value"}, automargin: true,
                                            range: [heads[0].low, heads[0].high * 1.08]}}));
      }
      bench.charts.forEach((chart, index) => drawChart(bench, chart, index, entries));
    });
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
      const answer = await fetch("/api/evaluations", {cache: "no-store", credentials: "same-origin"});
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

  function setUpForm() {
    const form = $("#evaluate");
    if (!form) return;
    const bench = $("#evaluate-benchmark"), corpus = $("#evaluate-corpus");
    const versions = () => {
      const chosen = data.available.find((b) => b.name === bench.value) || {corpus_versions: []};
      corpus.textContent = "";
      chosen.corpus_versions.forEach((v) => {
        const option = document.createElement("option");
        option.value = option.textContent = v;
        corpus.appendChild(option);
      });
      $("#evaluate-corpus-label").classList.toggle("hidden", !chosen.corpus_versions.length);
    };
    bench.addEventListener("change", versions);
    versions();
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = {model_id: $("#evaluate-model").value.trim(), benchmark: bench.value};
      if (corpus.options.length) body.corpus_version = corpus.value;
      if ($("#evaluate-label").value.trim()) body.label = $("#evaluate-label").value.trim();
      const headers = {"Content-Type": "application/json"};
      const status = $("#evaluate-status");
      try {
        const answer = await fetch("/api/evaluations", {method: "POST", headers: headers, credentials: "same-origin",
                                                      body: JSON.stringify(body)});
        const reply = await answer.json();
        status.textContent = answer.ok ? "started " + reply.run_id + " (" + reply.total_items + " items)" : reply.message;
        if (answer.ok) setTimeout(poll, 500);
      } catch (error) { status.textContent = "could not reach the service: " + error; }
    });
  }

  $$("th.sortable").forEach((th) => th.addEventListener("click", () => sortBy(th)));
  $$(".filters input").forEach((el) => el.addEventListener("input", applyFilters));
  $$(".filters select, .select-run").forEach((el) => el.addEventListener("change", applyFilters));
  setUpForm();
  swatches();
  applyFilters();
  let resized = null;
  window.addEventListener("resize", () => {  // redraw at the new width (narrow screens angle labels, shrink fonts)
    clearTimeout(resized);
    document.body.dataset.redrawing = "1";
    resized = setTimeout(() => { applyFilters(); delete document.body.dataset.redrawing; }, 200);
  });
  if (data.live) setInterval(poll, 2000);
})();
