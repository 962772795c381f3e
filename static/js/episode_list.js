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

  // --- rows: a keyboard cursor (j/k, Enter opens, x ticks) and the selection's actions ------

  var rows = Array.prototype.slice.call(document.querySelectorAll("#episode-rows tbody tr"));
  var count = document.getElementById("selected-count");
  var cursor = -1;

  function typing(target) {
    var tag = target && target.tagName;
    if (tag === "INPUT") return target.type !== "checkbox";  // a ticked box keeps j/k working
    return tag === "SELECT" || tag === "TEXTAREA" || (target && target.isContentEditable);
  }

  function moveTo(index) {
    if (!rows.length) return;
    if (cursor >= 0) rows[cursor].classList.remove("cursor");
    cursor = Math.min(rows.length - 1, Math.max(0, index));
    rows[cursor].classList.add("cursor");
    rows[cursor].scrollIntoView({ block: "nearest" });
  }

  function selected() {
    return document.querySelectorAll("#episode-rows input[name=ids]:checked");
  }

  // What Compare does for two ticked rows (episode_selection decides the same on the
  // server): two runs of one query open the compare view; two queries of one evaluation
  // run open its paired comparison, for those who can open it; anything else is not
  // offered, and the count says why.
  var evaluationsOpen = document.querySelector("#row-actions[data-evaluations=open]") !== null;

  function compareOffer(boxes) {
    if (boxes.length !== 2) return { label: "Compare", why: " (compare needs two)" };
    var a = boxes[0].dataset, b = boxes[1].dataset;
    if (!a.query || !b.query) return { why: ": a recorded session has no query to compare by" };
    if (a.query === b.query) return { label: "Compare", why: "" };
    var why = ": compare shows runs of one query, and these two answer different queries";
    if (!a.evaluation || a.evaluation !== b.evaluation) {
      return { why: why + " outside any one evaluation run" };
    }
    if (!evaluationsOpen) return { why: why + " (their evaluation run's comparison is for researchers)" };
    return { label: "Compare in evaluation run " + a.evaluation, why: "" };
  }

  function updateCount() {
    if (!count) return;
    var boxes = selected();
    var n = boxes.length;
    var offer = compareOffer(boxes);
    count.textContent = n ? n + " selected" + offer.why : "Tick rows to act on them.";
    var compare = document.querySelector("#row-actions button[value=compare]");
    if (compare) {
      compare.disabled = n !== 2 || !offer.label;
      compare.textContent = offer.label || "Compare";
    }
    document.querySelectorAll("#row-actions button[value=label], #row-actions button[value=export]")
      .forEach(function (b) { b.disabled = n === 0; });
  }

  document.addEventListener("change", function (event) {
    if (event.target.name === "ids") updateCount();
  });

  document.addEventListener("keydown", function (event) {
    if (!rows.length || event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) return;
    if (event.key === "j") moveTo(cursor + 1);
    else if (event.key === "k") moveTo(cursor < 0 ? 0 : cursor - 1);
    else if (event.key === "Enter" && cursor >= 0 && !/^(A|BUTTON)$/.test(event.target.tagName)) window.location.assign(rows[cursor].dataset.href);
    else if (event.key === "x" && cursor >= 0) {
      var box = rows[cursor].querySelector("input[name=ids]");
      box.checked = !box.checked;
      updateCount();
    } else return;
    event.preventDefault();
  });

  updateCount();

  // --- the column chooser: untick a column to hide it (the metrics then fit a narrow
  // screen); the choice is kept in this browser and applies to every list ----------------

  var STORE = "episode-list-hidden-columns";
  var chooser = document.getElementById("column-chooser");
  var table = document.getElementById("episode-rows");
  var headers = table ? Array.prototype.slice.call(table.querySelectorAll("thead th[data-col]")) : [];

  function storedHidden() {
    try { return JSON.parse(window.localStorage.getItem(STORE) || "[]"); } catch (e) { return []; }
  }

  function store(hidden) {
    try { window.localStorage.setItem(STORE, JSON.stringify(hidden)); } catch (e) { /* not kept */ }
  }

  function showColumns(hidden) {
    headers.forEach(function (th) {
      var hide = hidden.indexOf(th.dataset.col) >= 0;
      Array.prototype.forEach.call(table.rows, function (row) {
        if (row.cells[th.cellIndex]) row.cells[th.cellIndex].hidden = hide;
      });
    });
    var summary = chooser.querySelector("summary");
    var count = headers.filter(function (th) { return hidden.indexOf(th.dataset.col) >= 0; }).length;
    summary.textContent = count ? "Columns (" + count + " hidden)" : "Columns";
  }

  if (chooser && headers.length) {
    var list = chooser.querySelector(".column-list");
    var hidden = storedHidden();
    headers.forEach(function (th) {
      var label = document.createElement("label");
      var box = document.createElement("input");
      box.type = "checkbox";
      box.value = th.dataset.col;
      box.checked = hidden.indexOf(th.dataset.col) < 0;
      box.addEventListener("change", function () {
        hidden = hidden.filter(function (col) { return col !== box.value; });
        if (!box.checked) hidden.push(box.value);
        store(hidden);
        showColumns(hidden);
      });
      label.appendChild(box);
      label.appendChild(document.createTextNode(" " + (th.dataset.colLabel || th.textContent.trim())));
      list.appendChild(label);
    });
    chooser.hidden = false;
    showColumns(hidden);
  }
});
