// The annotation queue's keys: a / r / f label (submit the form with that label), s skips,
// j / k go to the next / previous item (the links the page names; k falls back to
// history.back()), ? toggles the help, Esc closes it. Ignored while typing in a field or
// with a modifier.
(function () {
  "use strict";
  const root = document.getElementById("annotate");
  if (!root) return;
  const overlay = document.getElementById("help-overlay");
  const LABEL_KEYS = { a: "approve", r: "reject", f: "flag" };

  function typing(target) {
    if (!(target instanceof Element)) return false;
    return target.isContentEditable || target.closest("input, textarea, select") !== null;
  }

  function toggleHelp(show) {
    if (!overlay) return;
    overlay.hidden = show === undefined ? !overlay.hidden : !show;
  }

  let submitted = false; // one submission per page: a held key must not label twice

  function label(value) {
    press(document.querySelector('#label-form button[name="label"][value="' + value + '"]'));
  }

  function press(button) {
    if (!button || submitted) return;
    submitted = true;
    if (button.form.requestSubmit) button.form.requestSubmit(button);
    else button.click();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    if (typing(event.target)) return;
    const key = event.key;
    if (key === "?") {
      toggleHelp();
    } else if (key === "Escape") {
      toggleHelp(false);
      return;
    } else if (overlay && !overlay.hidden) {
      return; // with the help open, only ? and Esc act
    } else if (LABEL_KEYS[key]) {
      label(LABEL_KEYS[key]);
    } else if (key === "s") {
      press(document.getElementById("skip-button"));
    } else if (key === "j") {
      if (root.dataset.nextUrl) window.location.assign(root.dataset.nextUrl);
      else return;
    } else if (key === "k") {
      if (root.dataset.prevUrl) window.location.assign(root.dataset.prevUrl);
      else window.history.back();
    } else {
      return;
    }
    event.preventDefault();
  });

  const close = document.getElementById("help-close");
  if (close) close.addEventListener("click", function () { toggleHelp(false); });
  if (overlay) {
    overlay.addEventListener("click", function (event) {
      if (event.target === overlay) toggleHelp(false);
    });
  }
})();
