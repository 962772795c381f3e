// The annotation queue's keys: a / r / f label (submit the form with that label and the
// reason chosen), 0-9 choose a reason (0: none), s skips, u undoes the last decision, v opens
// the full viewer, j / k go to the next / previous item (the links the page names; k falls
// back to history.back()), ? toggles the help, Esc closes it.
//
// Keys never reach a focused control: on a button, a reason radio or anywhere else they act
// as shortcuts and are kept from the control (a select's type-ahead once turned "Curated the
// wrong evidence" into "Reward hacking" under the annotator's `r`). Only text entry keeps its
// keys: the notes, a text field, a select (its type-ahead is typing), with a modifier.
(function () {
  "use strict";
  const root = document.getElementById("annotate");
  if (!root) return;
  const overlay = document.getElementById("help-overlay");
  const form = document.getElementById("label-form");
  const willSave = document.getElementById("will-save");
  const LABEL_KEYS = { a: "approve", r: "reject", f: "flag" };
  const LABEL_NAMES = { approve: "Approve", reject: "Reject", flag: "Flag" };
  const TEXT_INPUTS = ["text", "search", "email", "number", "password", "tel", "url", "date",
    "datetime-local", "month", "time", "week"];

  function typing(target) {
    if (!(target instanceof Element)) return false;
    if (target.isContentEditable) return true;
    if (target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return true;
    return target instanceof HTMLInputElement && TEXT_INPUTS.includes(target.type);
  }

  function toggleHelp(show) {
    if (!overlay) return;
    overlay.hidden = show === undefined ? !overlay.hidden : !show;
  }

  function reasonRadio(key) {
    return form ? form.querySelector('input[name="reason"][data-key="' + key + '"]') : null;
  }

  function chosenReason() {
    const radio = form ? form.querySelector('input[name="reason"]:checked') : null;
    return radio && radio.value ? radio.dataset.text : "";
  }

  function kbd(key) {
    const el = document.createElement("kbd");
    el.textContent = key;
    return el;
  }

  // "r will save: Reject — <reason>", as the server first drew it; text nodes only. `warn`
  // marks the line when `r` was pressed without a reason.
  function showWillSave(warn) {
    if (!willSave) return;
    const reason = chosenReason();
    const parts = [];
    if (reason) {
      const bold = document.createElement("b");
      bold.textContent = "Reject — " + reason;
      parts.push(kbd("r"), " will save: ", bold, " · ", kbd("a"), " ", kbd("f"));
      parts.push(": Approve, Flag with it");
    } else {
      const bold = document.createElement("b");
      bold.textContent = "Approve";
      parts.push(kbd("a"), " will save: ", bold, " · ", kbd("f"), ": Flag · ", kbd("r"));
      parts.push(" needs a reason first (keys 1–" + (root.dataset.reasonLast || "") + ")");
    }
    willSave.replaceChildren.apply(willSave, parts);
    willSave.classList.toggle("needs-reason", Boolean(warn) && !reason);
  }

  let submitted = false; // one submission per page: a held key must not label twice

  function label(value) {
    if (!form) return;
    if (value === "reject" && !chosenReason()) {
      showWillSave(true);
      const first = reasonRadio("1");
      if (first) first.focus(); // the reasons take the next number key
      return;
    }
    press(form.querySelector('button[name="label"][value="' + value + '"]'));
  }

  function press(button) {
    if (!button || submitted) return;
    submitted = true;
    if (button.form && button.form.requestSubmit) button.form.requestSubmit(button);
    else button.click();
  }

  function chooseReason(key) {
    const radio = reasonRadio(key);
    if (!radio) return false;
    radio.checked = true;
    showWillSave();
    return true;
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
    } else if (/^[0-9]$/.test(key)) {
      if (!chooseReason(key)) return;
    } else if (LABEL_KEYS[key]) {
      label(LABEL_KEYS[key]);
    } else if (key === "s") {
      press(document.getElementById("skip-button"));
    } else if (key === "u") {
      press(document.getElementById("undo-button"));
    } else if (key === "v") {
      if (root.dataset.viewerUrl) window.location.assign(root.dataset.viewerUrl);
    } else if (key === "j") {
      if (root.dataset.nextUrl) window.location.assign(root.dataset.nextUrl);
    } else if (key === "k") {
      if (root.dataset.prevUrl) window.location.assign(root.dataset.prevUrl);
      else window.history.back();
    } else {
      return; // other keys (arrows, Tab, Space, Enter): the focused control's own
    }
    event.preventDefault();
  });

  if (form) {
    form.addEventListener("change", function (event) {
      if (event.target instanceof HTMLInputElement && event.target.name === "reason") showWillSave();
    });
  }
  const close = document.getElementById("help-close");
  if (close) close.addEventListener("click", function () { toggleHelp(false); });
  if (overlay) {
    overlay.addEventListener("click", function (event) {
      if (event.target === overlay) toggleHelp(false);
    });
  }
})();
