// Compare view: recall per turn of episode A (solid) and B (dashed). B's thin dashed line and
// open diamonds are drawn over A's wide translucent line and dots, so where the two runs
// coincide (a deterministic policy's samples) both stay visible.
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
    var styles = {
      a: { dash: "solid", width: 4, opacity: 0.55, symbol: "circle", size: 7 },
      b: { dash: "dash", width: 1.5, opacity: 1, symbol: "diamond-open", size: 9 },
    };
    [["a", "A"], ["b", "B"]].forEach(function (side) {
      var style = styles[side[0]];
      var run = data[side[0]];
      curves.forEach(function (curve, i) {
        traces.push({
          type: "scatter",
          mode: "lines+markers",
          name: side[1] + " " + curve[1],
          x: run.turns,
          y: run[curve[0]],
          opacity: style.opacity,
          line: { color: colours[i], dash: style.dash, width: style.width, shape: "hv" },
          marker: { size: style.size, symbol: style.symbol, line: { width: 1.5, color: colours[i] } },
        });
      });
    });
    var layout = H.layout({
      legend: { orientation: "h", y: -0.3 },
      margin: { l: 48, r: 16, t: 16, b: 90 },
      xaxis: H.axis({ title: { text: "turn (0: the start)" }, dtick: data.a.turns.length > 30 ? 5 : 1 }),
      yaxis: H.axis({ range: [0, 1.05], title: { text: "recall" } }),
    });
    window.Plotly.react(element, traces, layout, H.config);
  }

  draw();
  H.onThemeChange(draw);
});
