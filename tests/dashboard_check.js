// text that overflows its box (HTML), chart text outside its chart (SVG), and charts without titles
const out = {overflow: [], cut: [], untitled: [], nointerval: []};
const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
document.querySelectorAll("h1,h2,h3,th,td,caption,label,li,figcaption,span,button,option").forEach((el) => {
  if (!visible(el) || el.closest(".js-plotly-plot") || el.closest(".scroll")) return;
  if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).display !== "inline") out.overflow.push(el.tagName + ": " + el.textContent.trim().slice(0, 60));
});
document.querySelectorAll(".js-plotly-plot").forEach((plot) => {
  if (!visible(plot)) return;
  const box = plot.getBoundingClientRect();
  plot.querySelectorAll(".main-svg text, .infolayer text").forEach((t) => {
    if (!t.textContent.trim() || !visible(t)) return;
    const r = t.getBoundingClientRect();
    if (r.width === 0) return;
    if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
      out.cut.push(plot.id + ": " + t.textContent.trim().slice(0, 40));
  });
  const lay = plot.layout || {};
  const title = (x) => x && x.title && (typeof x.title === "string" ? x.title : x.title.text);
  if (!title(lay)) out.untitled.push((plot.id || plot.dataset.key) + ": chart title");
  const cartesian = (plot.data || []).some((t) => t.type !== "scatterpolar");
  if (cartesian && (!title(lay.xaxis) || !title(lay.yaxis))) out.untitled.push((plot.id || plot.dataset.key) + ": axis title");
  if (!cartesian && !title((lay.polar || {}).radialaxis)) out.untitled.push(plot.id + ": radial axis title");
  (plot.data || []).forEach((t) => {
    if (t.type === "bar" && !(t.error_y && t.error_y.array && t.error_y.array.length === t.y.length)) out.nointerval.push(plot.id + ": " + t.name);
  });
});
return out;
