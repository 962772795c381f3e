// Batch launch form: keeps the deterministic-policy warning in step with the policy and
// samples-per-query fields (the server draws it right for the form's first state).
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var warning = document.getElementById("samples-warning");
  var policy = document.getElementById("id_policy");
  var samples = document.getElementById("id_samples_per_query");
  var data = document.getElementById("deterministic-policies");
  if (!warning || !policy || !samples || !data) return;
  var ids = JSON.parse(data.textContent).map(String);

  function update() {
    warning.hidden = !(ids.indexOf(policy.value) >= 0 && Number(samples.value) > 1);
  }

  policy.addEventListener("change", update);
  samples.addEventListener("input", update);
  update();
});
