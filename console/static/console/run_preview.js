/* The endpoint form's run preview: as the person types, post the form's values to the
   preview view (console/admin/preview.py: nothing is saved) and show the next runs, or the
   form's messages when the values cannot be planned. Plain DOM, no build step; every
   value is put in as text, never as HTML. */
"use strict";
(function () {
  var DEBOUNCE_MS = 400;

  function element(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function runsTable(runs, zone) {
    var table = element("table", undefined, "cc-table cc-preview-runs");
    var head = table.createTHead().insertRow();
    ["#", "In " + zone, "UTC", "Why"].forEach(function (title) {
      var th = element("th", title);
      th.scope = "col";
      head.appendChild(th);
    });
    var body = table.createTBody();
    runs.forEach(function (run, index) {
      var row = body.insertRow();
      row.appendChild(element("td", String(index + 1)));
      row.appendChild(element("td", run.local, "cc-code"));
      row.appendChild(element("td", run.utc + " UTC", "cc-code"));
      row.appendChild(element("td", run.why));
      row.dataset.source = run.source;
    });
    return table;
  }

  function problemList(errors) {
    var list = element("ul", undefined, "errorlist cc-preview-errors");
    errors.forEach(function (problem) {
      problem.messages.forEach(function (message) {
        list.appendChild(element("li", problem.label + ": " + message));
      });
    });
    return list;
  }

  function show(panel, status, nodes) {
    panel.querySelector(".cc-preview-status").textContent = status;
    var body = panel.querySelector(".cc-preview-body");
    body.replaceChildren.apply(body, nodes);
  }

  function render(panel, answer) {
    if (answer.busy) {  // over the user's share of the server's CPU (HTTP 429): said, nothing else
      show(panel, "The preview is paused: " + answer.busy, []);
      return;
    }
    // The field editors (console/static/console/editors.js) put its messages by their fields.
    panel.dispatchEvent(new CustomEvent("cc:preview", { bubbles: true, detail: answer }));
    if (answer.errors) {
      show(panel, "These values cannot be planned; a save would say:", [problemList(answer.errors)]);
      return;
    }
    var nodes = [];
    if (answer.runs.length) nodes.push(runsTable(answer.runs, answer.timezone));
    answer.notes.forEach(function (note) { nodes.push(element("p", note, "cc-muted")); });
    var status = answer.schedule + " — next " + answer.runs.length +
      " run(s) as of " + answer.computed_at + " UTC:";
    show(panel, status, nodes);
  }

  function start(panel) {
    var form = panel.closest("form");
    var timer = null;
    var current = null;

    function ask() {
      timer = null;
      if (current) current.abort();
      var request = new AbortController();
      current = request;
      fetch(panel.dataset.url, {
        method: "POST",
        body: new FormData(form),
        credentials: "same-origin",
        headers: { "X-Requested-With": "XMLHttpRequest" },
        signal: request.signal,
      })
        .then(function (response) {
          var kind = response.headers.get("Content-Type") || "";
          if (kind.indexOf("application/json") !== 0) {
            throw new Error("the server answered HTTP " + response.status);
          }
          return response.json();
        })
        .then(function (answer) {
          if (current === request) render(panel, answer);
        })
        .catch(function (error) {
          if (error.name === "AbortError") return;
          show(panel, "The preview is not available (" + error.message + "); saving still works.", []);
        })
        .finally(function () {
          if (current === request) {
            current = null;
            if (timer === null) panel.setAttribute("aria-busy", "false");
          }
        });
    }

    // Busy (the list shown is out of date) from a change until the answer to the last one.
    function later() {
      panel.setAttribute("aria-busy", "true");
      clearTimeout(timer);
      timer = setTimeout(ask, DEBOUNCE_MS);
    }

    form.addEventListener("input", later);
    form.addEventListener("change", later);
    // The job's autocomplete (select2) announces a choice through jQuery only.
    if (window.django && window.django.jQuery) window.django.jQuery(form).on("change", "select", later);

    var cron = form.querySelector("[name=baseline_cron]");
    var interval = form.querySelector("[name=baseline_interval_ms]");
    if ((cron && cron.value.trim()) || (interval && interval.value.trim())) later();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var panel = document.getElementById("cc-run-preview");
    if (panel) start(panel);
  });
})();
