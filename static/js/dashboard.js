// Dashboard: the three recall charts by benchmark · policy · settings, one bar series per
// ablation; each bar is a mean with ± one standard deviation as its error bar and its n.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("chart-data");
  if (!data || !window.Plotly) return;
  var titles = {
    curated_recall: "Curated recall",
    final_answer_recall: "Final-answer recall",
    trajectory_recall: "Trajectory recall",
  };

  function draw() {
    var colours = H.palette();
    Object.keys(titles).forEach(function (metric) {
      var element = document.getElementById("chart-" + metric);
      if (!element) return;
      var traces = data.metrics[metric].map(function (series, i) {
        return {
          type: "bar",
          name: H.safe(series.name),
          x: data.conditions.map(H.safe),
          y: series.y,
          customdata: series.n.map(function (n, j) { return [n, series.std[j]]; }),
          error_y: { type: "data", array: series.std, visible: true },
          text: series.n.map(function (n) { return n ? "n=" + n : ""; }),
          textposition: "inside",
          insidetextanchor: "start",
          marker: { color: colours[i % colours.length] },
          hovertemplate: "%{x}<br>%{y:.3f} ± %{customdata[1]:.3f} sd (n=%{customdata[0]})",
        };
      });
      var layout = H.layout({
        title: { text: titles[metric], font: { size: 14 } },
        barmode: "group",
        xaxis: H.axis(),
        yaxis: H.axis({ range: [0, 1], title: { text: "mean" } }),
      });
      window.Plotly.react(element, traces, layout, H.config);
    });
  }

  draw();
  H.onThemeChange(draw);
});
