// SFT job page: train and eval loss per optimiser step, and the learning rate. Data comes
// from the json_script "sft-curves"; the eval loss is logged every eval_steps, so its
// trace connects the steps that have one.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("sft-curves");
  if (!data || !window.Plotly) return;

  function line(name, y, colour) {
    return {
      type: "scatter", mode: "lines+markers", name: name, x: data.steps, y: y,
      connectgaps: true, line: { color: colour }, hovertemplate: "step %{x}: %{y:.4g}",
    };
  }

  function chart(id, title, traces, yaxis) {
    var element = document.getElementById(id);
    if (!element) return;
    var layout = H.layout({
      title: { text: title, font: { size: 14 } },
      xaxis: H.axis({ title: { text: "step" } }),
      yaxis: H.axis(yaxis || {}),
    });
    window.Plotly.react(element, traces, layout, H.config);
  }

  function draw() {
    var colours = H.palette();
    chart("sft-chart-loss", "Loss", [
      line("train loss", data.loss, colours[0]),
      line("eval loss (held-out)", data.eval_loss, colours[2]),
    ]);
    chart("sft-chart-lr", "Learning rate", [line("learning rate", data.learning_rate, colours[1])],
      { exponentformat: "e" });
  }

  draw();
  H.onThemeChange(draw);
});
