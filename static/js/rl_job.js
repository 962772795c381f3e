// RL job page: training curves per step (reward and its components, recall, kept groups,
// the trainer-versus-sampler logprob gap). Data comes from the json_script "rl-curves".
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var H = window.HarnessCharts;
  var data = H.readJson("rl-curves");
  if (!data || !window.Plotly) return;
  var labels = {
    reward_mean: "reward (mean)",
    curated_recall: "curated recall",
    trajectory_recall: "trajectory recall",
    final_answer_recall: "final-answer recall",
    kept_fraction: "groups kept",
    logprob_gap: "mean |gap|",
    logprob_gap_max: "max |gap|",
  };

  function line(name, y, colour, extra) {
    return Object.assign({
      type: "scatter", mode: "lines+markers", name: H.safe(name), x: data.steps, y: y,
      line: { color: colour }, hovertemplate: "step %{x}: %{y:.4g}",
    }, extra || {});
  }

  function chart(id, title, traces, yaxis) {
    var element = document.getElementById(id);
    if (!element) return;
    var layout = H.layout({
      title: { text: title, font: { size: 14 } },
      xaxis: H.axis({ title: { text: "step" }, dtick: 1 }),
      yaxis: H.axis(yaxis || {}),
    });
    window.Plotly.react(element, traces, layout, H.config);
  }

  function draw() {
    var colours = H.palette();
    var s = data.series;
    var reward = [line(labels.reward_mean, s.reward_mean, colours[0], { line: { width: 3, color: colours[0] } })];
    Object.keys(data.components).forEach(function (name, i) {
      reward.push(line(name.replace(/_/g, " "), data.components[name],
        colours[(i + 1) % colours.length], { line: { dash: "dot", color: colours[(i + 1) % colours.length] }, visible: "legendonly" }));
    });
    chart("rl-chart-reward", "Reward and components", reward);
    chart("rl-chart-recall", "Recall", ["curated_recall", "trajectory_recall", "final_answer_recall"].map(
      function (name, i) { return line(labels[name], s[name], colours[i % colours.length]); }),
      { range: [0, 1] });
    chart("rl-chart-groups", "Kept-group fraction",
      [line(labels.kept_fraction, s.kept_fraction, colours[1], { type: "bar", mode: undefined, marker: { color: colours[1] } })],
      { range: [0, 1] });
    chart("rl-chart-gap", "Logprob gap, trainer vs sampler",
      [line(labels.logprob_gap, s.logprob_gap, colours[0]), line(labels.logprob_gap_max, s.logprob_gap_max, colours[3])],
      { type: "log", exponentformat: "e" });
  }

  draw();
  H.onThemeChange(draw);
});
