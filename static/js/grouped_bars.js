// Grouped bar charts with error bars, for every element marked data-grouped-bars="PREFIX":
// its data is the json_script "PREFIX-data" ({groups, charts: [{id, title, unit_range,
// series: [{label, mean, std}]}]}) and each chart is drawn into the element "PREFIX-<id>".
// Each bar is a mean over runs with the std across runs as its error bar. Used by the
// ablation matrices (one group per condition) and the evaluation runs' transfer table (one
// group per benchmark).
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  if (!window.Plotly) return;
  var blocks = Array.prototype.slice.call(document.querySelectorAll("[data-grouped-bars]"));

  function drawBlock(prefix) {
    var data = H.readJson(prefix + "-data");
    if (!data) return;
    var groups = (data.groups || data.conditions).map(H.safe);
    var colours = H.palette();
    data.charts.forEach(function (chart) {
      var element = document.getElementById(prefix + "-" + chart.id);
      if (!element) return;
      var traces = chart.series.map(function (series, i) {
        return {
          type: "bar",
          name: H.safe(series.label),
          x: groups,
          y: series.mean,
          customdata: series.std,
          error_y: { type: "data", array: series.std, visible: true },
          marker: { color: colours[i % colours.length] },
          hovertemplate: "%{x}<br>%{y:.3f} ± %{customdata:.3f}",
        };
      });
      var yaxis = chart.unit_range ? { range: [0, 1], title: { text: "mean" } }
                                   : { rangemode: "tozero", title: { text: "mean" } };
      var layout = H.layout({
        title: { text: H.safe(chart.title), font: { size: 14 } },
        barmode: "group",
        // The legend goes above the plot: below it, it would sit on the slanted names.
        legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
        margin: { l: 48, r: 16, t: 72, b: 40 },
        xaxis: H.axis({ tickangle: -30 }),
        yaxis: H.axis(yaxis),
      });
      window.Plotly.react(element, traces, layout, H.config);
    });
  }

  function draw() {
    blocks.forEach(function (block) { drawBlock(block.dataset.groupedBars); });
  }

  draw();
  H.onThemeChange(draw);
});
