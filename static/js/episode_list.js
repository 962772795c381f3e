// Episode list: the URL is the filter's permalink. Empty fields stay out of it, and the
// copy button puts it on the clipboard.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var form = document.getElementById("episode-filters");
  var button = document.getElementById("copy-link");
  var status = document.getElementById("copy-status");

  if (form) {
    form.addEventListener("submit", function () {
      Array.prototype.forEach.call(form.elements, function (field) {
        if (field.name && field.value === "") field.disabled = true;
      });
    });
    // Coming back with the browser's back button must not leave fields disabled.
    window.addEventListener("pageshow", function () {
      Array.prototype.forEach.call(form.elements, function (field) { field.disabled = false; });
    });
  }

  function fallbackCopy(text) {
    var input = document.createElement("textarea");
    input.value = text;
    input.setAttribute("readonly", "");
    input.style.position = "absolute";
    input.style.left = "-9999px";
    document.body.appendChild(input);
    input.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(input);
    return ok;
  }

  if (button) {
    button.addEventListener("click", function () {
      var url = window.location.href;
      var done = function () { status.textContent = "Link copied."; };
      var failed = function () {
        status.textContent = fallbackCopy(url) ? "Link copied." : "Copy this page's address.";
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(url).then(done, failed);
      } else {
        failed();
      }
    });
  }
});
