// Batch page: a form with data-confirm (Cancel batch) asks before it submits. Listening on
// the document keeps it working after htmx swaps the live block in again.
document.addEventListener("submit", function (event) {
  "use strict";
  var form = event.target;
  var question = form.getAttribute && form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});
