// The viewer's previous/next episode in the list it came from: "[" and "]" follow the
// links (the arrow keys step through turns). Ignored while typing in a field.
document.addEventListener("keydown", function (event) {
  "use strict";
  if (event.altKey || event.ctrlKey || event.metaKey) return;
  var tag = event.target && event.target.tagName;
  if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" ||
      (event.target && event.target.isContentEditable)) return;
  var id = { "[": "episode-prev", "]": "episode-next" }[event.key];
  var link = id && document.getElementById(id);
  if (!link) return;
  event.preventDefault();
  window.location.assign(link.href);
});
