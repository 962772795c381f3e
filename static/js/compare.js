// Compare view: recall per turn of episode A (solid) and B (dashed).
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("compare-data");
  var element = document.getElementById("compare-plot");
  if (!data || !element || !window.Plotly) return;
  var curves = [
    ["curated", "curated recall"],
    ["trajectory", "trajectory recall"],
    ["final_answer", "final-answer recall"],
  ];

  function draw() {
    var colours = H.palette();
    var traces = [];
    [["a", "A", "solid"], ["b", "B", "dash"]].forEach(function (side) {
      var run = data[side[0]];
      curves.forEach(function (curve, i) {
        traces.push({
          type: "scatter",
          mode: "lines+markers",
          name: side[1] + " " + curve[1],
          x: run.turns,
          y: run[curve[0]],
          line: { color: colours[i], dash: side[2], shape: "hv" },
          marker: { size: 5 },
        });
      });
    });
    var layout = H.layout({
      legend: { orientation: "h", y: -0.3 },
      margin: { l: 48, r: 16, t: 16, b: 90 },
      xaxis: H.axis({ title: { text: "turn" }, dtick: data.a.turns.length > 30 ? 5 : 1 }),
      yaxis: H.axis({ range: [0, 1.05], title: { text: "recall" } }),
    });
    window.Plotly.react(element, traces, layout, H.config);
  }

  draw();
  H.onThemeChange(draw);
});
