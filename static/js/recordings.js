// Recording sessions: Close and Revoke ask before they submit (data-confirm), and a copy
// button (data-copy = the id of the element whose text it copies) puts the new key or its
// environment lines on the clipboard.
document.addEventListener("submit", function (event) {
  "use strict";
  var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});

document.addEventListener("click", function (event) {
  "use strict";
  var button = event.target.closest && event.target.closest("button[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.getAttribute("data-copy"));
  var status = document.getElementById("copy-status");
  var text = source ? source.textContent.trim() : "";
  var say = function (message) { if (status) status.textContent = message; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(
      function () { say("Copied."); },
      function () { say("Select the text and copy it."); }
    );
  } else {
    var range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    say("Selected: press Ctrl+C (⌘C) to copy.");
  }
});
