// Dashboard: the three recall charts by benchmark · policy · settings, one bar series per
// ablation; each bar is a mean with ± one standard deviation as its error bar and its n.
// Experiment labels can be long (a policy's name, reward weights): the ticks name only what
// tells the experiments apart, cut short; the full label is in the hover, the parts every
// experiment shares in the axis title, and the chart keeps a readable plot area.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("chart-data");
  if (!data || !window.Plotly) return;
  var TICK_CHARS = 28;
  var LEGEND_CHARS = 32;
  var MIN_PLOT = 220; // px of plot area, whatever the labels take
  var titles = {
    curated_recall: "Curated recall",
    final_answer_recall: "Final-answer recall",
    trajectory_recall: "Trajectory recall",
  };

  // Which of benchmark, policy and settings differ between experiments: the ticks show
  // those, the axis title the ones they all share.
  function axisLabels(parts) {
    var varying = [0, 1, 2].filter(function (k) {
      return parts.some(function (p) { return p[k] !== parts[0][k]; });
    });
    var shared = [0, 1, 2].filter(function (k) { return varying.indexOf(k) < 0; });
    var shown = varying.length ? varying : shared;
    var ticks = parts.map(function (p) {
      return H.shorten(shown.map(function (k) { return p[k]; }).join(" · "), TICK_CHARS);
    });
    // Two ticks cut to the same text are told apart by their number.
    if (new Set(ticks).size < ticks.length) {
      ticks = ticks.map(function (tick, i) { return H.shorten((i + 1) + ". " + tick, TICK_CHARS); });
    }
    var common = varying.length ? shared.map(function (k) { return parts[0][k]; }).join(" · ") : "";
    return { ticks: ticks.map(H.safe), title: H.safe(H.shorten(common, 60)) };
  }

  var labels = axisLabels(data.condition_parts);
  var conditions = data.conditions.map(H.safe);

  function draw() {
    var colours = H.palette();
    Object.keys(titles).forEach(function (metric) {
      var element = document.getElementById("chart-" + metric);
      if (!element) return;
      var traces = data.metrics[metric].map(function (series, i) {
        var name = H.safe(series.name);
        return {
          type: "bar",
          name: H.shorten(name, LEGEND_CHARS),
          x: conditions,
          y: series.y,
          customdata: series.n.map(function (n, j) {
            return [n, series.std[j], name, conditions[j]];
          }),
          error_y: { type: "data", array: series.std, visible: true },
          text: series.n.map(function (n) { return n ? "n=" + n : ""; }),
          textposition: "inside",
          insidetextanchor: "start",
          marker: { color: colours[i % colours.length] },
          hovertemplate: "%{customdata[3]}<br>%{customdata[2]}: %{y:.3f} ± %{customdata[1]:.3f} sd" +
            " (n=%{customdata[0]})<extra></extra>",
        };
      });
      var layout = H.layout({
        title: { text: titles[metric], font: { size: 14 } },
        barmode: "group",
        xaxis: H.axis({
          tickmode: "array", tickvals: conditions, ticktext: labels.ticks,
          title: { text: labels.title, font: { size: 12 } },
        }),
        yaxis: H.axis({ range: [0, 1], title: { text: "mean" } }),
        // Below everything, whatever room the ticks take.
        legend: { orientation: "h", yref: "container", y: 0, yanchor: "bottom" },
      });
      window.Plotly.react(element, traces, layout, H.config).then(function () {
        H.keepPlotHeight(element, MIN_PLOT);
        if (element.dataset.heightKept) return;
        element.dataset.heightKept = "1";
        element.on("plotly_afterplot", function () { H.keepPlotHeight(element, MIN_PLOT); });
      });
    });
  }

  draw();
  H.onThemeChange(draw);
});
