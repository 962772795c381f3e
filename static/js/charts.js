// Shared by the pages that draw Plotly charts: theme-aware layouts, safe labels, JSON data.
// Chart data always arrives through json_script elements and is read with JSON.parse.
(function () {
  "use strict";

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // Plotly renders a small HTML subset (<b>, <a href>, ...) inside text, so labels taken from
  // documents or model output must never reach it with angle brackets.
  function safe(text) {
    return String(text === null || text === undefined ? "" : text)
      .replace(/</g, "‹").replace(/>/g, "›");
  }

  // A label cut to at most `max` characters, "…" marking the cut (the full one goes to hover).
  function shorten(text, max) {
    text = String(text);
    return text.length <= max ? text : text.slice(0, max - 1).trimEnd() + "…";
  }

  // The chart grows instead of squeezing its plot area below `minPlot` px when long tick
  // labels or a wrapped legend take room (a strip of bars cannot be read). Called after
  // every draw, resize included; once grown, it draws nothing more.
  function keepPlotHeight(element, minPlot) {
    var area = element.querySelector(".nsewdrag");
    var figure = element.querySelector(".main-svg");
    if (!area || !figure) return;
    var plot = area.getBoundingClientRect().height;
    if (plot >= minPlot - 1) return;
    var height = figure.getBoundingClientRect().height + minPlot - plot;
    window.Plotly.relayout(element, { height: Math.ceil(height) });
  }

  function readJson(id) {
    var element = document.getElementById(id);
    return element ? JSON.parse(element.textContent) : null;
  }

  function axis(extra) {
    var base = { gridcolor: cssVar("--border"), zerolinecolor: cssVar("--border"),
                 linecolor: cssVar("--border"), automargin: true };
    return Object.assign(base, extra || {});
  }

  function layout(extra) {
    var base = {
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: cssVar("--fg"), family: "system-ui, sans-serif", size: 12 },
      margin: { l: 48, r: 16, t: 36, b: 40 },
      legend: { orientation: "h", y: -0.2 },
      hoverlabel: { namelength: -1 },
    };
    return Object.assign(base, extra || {});
  }

  function palette() {
    return [cssVar("--accent"), cssVar("--ok"), cssVar("--warn"), cssVar("--bad"),
            cssVar("--gold"), cssVar("--muted")];
  }

  // Redraw when the theme changes, by toggle or by the system setting.
  function onThemeChange(callback) {
    new MutationObserver(callback).observe(document.documentElement,
      { attributes: true, attributeFilter: ["data-theme"] });
    if (window.matchMedia) {
      window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", callback);
    }
  }

  // A page that names plotly.js in its charts.js tag (data-plotly) fetches it after its load
  // event: plotly.js is 4.8 MB of script, and the page's text should show and respond first.
  var plotlySrc = document.currentScript ? document.currentScript.dataset.plotly : null;
  var waiting = [];

  function withPlotly(callback) {
    if (window.Plotly) { callback(); return; }
    waiting.push(callback);
    if (waiting.length > 1 || !plotlySrc) return;
    function fetchPlotly() {
      var script = document.createElement("script");
      script.src = plotlySrc;
      script.onload = function () { waiting.splice(0).forEach(function (run) { run(); }); };
      document.head.appendChild(script);
    }
    if (document.readyState === "complete") fetchPlotly();
    else window.addEventListener("load", fetchPlotly);
  }

  window.HarnessCharts = {
    axis: axis,
    config: { displaylogo: false, responsive: true },
    cssVar: cssVar,
    keepPlotHeight: keepPlotHeight,
    layout: layout,
    onThemeChange: onThemeChange,
    palette: palette,
    readJson: readJson,
    safe: safe,
    shorten: shorten,
    withPlotly: withPlotly,
  };
})();
