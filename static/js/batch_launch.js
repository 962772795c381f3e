// Batch launch form: samples per query follow the chosen policy (1 for a deterministic
// one, 4 otherwise) until the researcher types a value, and the deterministic-policy
// warning keeps in step with both fields (the server draws the form's first state).
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var warning = document.getElementById("samples-warning");
  var policy = document.getElementById("id_policy");
  var samples = document.getElementById("id_samples_per_query");
  var data = document.getElementById("deterministic-policies");
  if (!warning || !policy || !samples || !data) return;
  var ids = JSON.parse(data.textContent).map(String);
  // Absent when the form came back with the researcher's own value.
  var follows = samples.hasAttribute("data-follows-policy");

  function deterministic() {
    return ids.indexOf(policy.value) >= 0;
  }

  function update() {
    warning.hidden = !(deterministic() && Number(samples.value) > 1);
  }

  policy.addEventListener("change", function () {
    if (follows && policy.value) {
      samples.value = deterministic()
        ? samples.dataset.deterministicDefault
        : samples.dataset.sampledDefault;
    }
    update();
  });
  samples.addEventListener("input", function () {
    follows = false;
    update();
  });
  update();
});
