// An ablation matrix's grouped bar charts: one group per condition, one bar per metric,
// each bar the mean over runs with the std across runs as its error bar.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("ablation-chart-data");
  if (!data || !window.Plotly) return;

  function draw() {
    var colours = H.palette();
    data.charts.forEach(function (chart) {
      var element = document.getElementById("ablation-chart-" + chart.id);
      if (!element) return;
      var traces = chart.series.map(function (series, i) {
        return {
          type: "bar",
          name: H.safe(series.label),
          x: data.conditions.map(H.safe),
          y: series.mean,
          customdata: series.std,
          error_y: { type: "data", array: series.std, visible: true },
          marker: { color: colours[i % colours.length] },
          hovertemplate: "%{x}<br>%{y:.3f} ± %{customdata:.3f}",
        };
      });
      var yaxis = chart.id === "recall" ? { range: [0, 1], title: { text: "mean" } }
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

  draw();
  H.onThemeChange(draw);
});
