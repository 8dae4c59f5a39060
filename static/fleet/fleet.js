// Fleet UI behaviour that htmx does not cover. Event delegation, so it survives htmx swaps.
(function () {
  "use strict";

  // "Select all on page": a checkbox with data-select-all="<name>" ticks every checkbox of that name in its form.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box.matches("[data-select-all]")) {
      var form = box.form || document;
      form.querySelectorAll('input[type=checkbox][name="' + box.dataset.selectAll + '"]').forEach(function (other) {
        other.checked = box.checked;
        other.closest("tr") && other.closest("tr").classList.toggle("selected", box.checked);
      });
    } else if (box.matches("input[type=checkbox][name=gpu]")) {
      box.closest("tr") && box.closest("tr").classList.toggle("selected", box.checked);
    }
  });

  // Filter forms: leave empty fields out of htmx GETs, so the pushed URL reads "?q=…" and not "?site=&row=&…".
  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb !== "get") return;
    var params = event.detail.parameters;
    Object.keys(params).forEach(function (name) {
      if (params[name] === "" || params[name] === "unknown") delete params[name];
    });
  });

  // Buttons and forms with data-confirm ask first (the bulk "all matching" action).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var submitter = event.submitter;
    var message = (submitter && submitter.dataset.confirm) || form.dataset.confirm;
    if (message && !window.confirm(message)) {
      event.preventDefault();
    }
  });
})();
