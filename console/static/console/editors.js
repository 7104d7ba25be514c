/* Fields over the admin's JSON text areas (console/admin/policy_widgets.py): the run
   policy, the headers (with their secret toggles) and the body. Each editor fills its
   fields from the text area and writes the text area back on every change, so the form
   posts the same JSON as without this script and the one validation path judges it.
   Keys left untouched keep their stored JSON exactly. Messages of the last save and of
   each run preview (console/static/console/run_preview.js) are put beside the field they
   name. Plain DOM, no build step; values are put in as text, never as HTML. */
"use strict";
(function () {
  function element(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function parsed(text) {
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch (error) {
      return { ok: false, error: error.message };
    }
  }

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  function changed(node) {
    node.dispatchEvent(new Event("input", { bubbles: true }));
  }

  function showMessages(list, messages) {
    list.replaceChildren.apply(list, messages.map(function (text) { return element("li", text); }));
    list.hidden = messages.length === 0;
  }

  // The messages a save left on a field's row (the admin puts them above the field).
  function savedErrors(root) {
    var row = root.closest(".form-row");
    var list = row && row.querySelector(":scope > ul.errorlist");
    return list ? Array.prototype.slice.call(list.children) : [];
  }

  /* What every editor shares: the toggle between fields and JSON, the text area kept in
     step. ``kind`` fills the fields (returning a note, or throwing an Error in words when
     the JSON cannot be shown as fields) and writes the text area(s). */
  function editor(root, kind) {
    var fields = root.querySelector(".cc-editor");
    var raw = root.querySelector(".cc-raw");
    var tools = root.querySelector(".cc-editor-tools");
    var toggle = root.querySelector(".cc-toggle");
    var note = root.querySelector(".cc-editor-note");
    var state = { json: true };

    var help = document.getElementById(root.querySelector(".cc-raw textarea").id + "_helptext");

    function use(json, why) {
      state.json = json;
      if (help) help.hidden = !json;  // it tells how to write the JSON
      fields.hidden = json;
      raw.hidden = !json;
      toggle.textContent = json ? "Edit with fields" : "Edit as JSON";
      note.textContent = why || "";
      if (kind.shown) kind.shown(json);
    }

    function toFields() {
      try {
        use(false, kind.fill());
      } catch (error) {
        use(true, error.message);
      }
    }

    tools.hidden = false;
    toggle.addEventListener("click", function () {
      if (state.json) toFields();
      else use(true, "Any change here is kept; switch back to see it as fields.");
    });
    fields.addEventListener("input", function (event) {
      kind.input(event.target);
      kind.write();
    });
    fields.addEventListener("change", function (event) {
      kind.input(event.target);
      kind.write();
    });
    toFields();
    return state;
  }

  // --- rows (windows, headers) --------------------------------------------------------------

  function addRow(container) {
    var template = container.parentNode.querySelector(".cc-row-template");
    var row = template.content.firstElementChild.cloneNode(true);
    container.appendChild(row);
    return row;
  }

  function rowsOf(container) {
    return Array.prototype.slice.call(container.children);
  }

  // --- the run policy ------------------------------------------------------------------------

  var MOMENT = /^(\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d)?)(Z|[+-]\d\d:\d\d)$/;
  var CLOCK = /^\d\d:\d\d$/;
  // The days a window row offers, in week order (endpoints.windows.DAYS, via the template).
  function daysOf(node) {
    var template = node.querySelector(".cc-row-template");
    return Array.prototype.map.call(template.content.querySelectorAll(".cc-days input"), function (box) {
      return box.value;
    });
  }

  function valueInput(node) {
    return node.querySelector(".cc-value");
  }

  function nullBox(node) {
    return node.querySelector(".cc-null");
  }

  // The count of an overlap allowance shows only while "allow" is chosen.
  function allowShown(node) {
    var count = node.querySelector(".cc-allow-count");
    if (count) count.hidden = valueInput(node).value !== "allow";
  }

  function isWhole(value) {
    return typeof value === "number" && Math.floor(value) === value;
  }

  /* Per kind of key: ``show(node, value)`` puts a stored value in the fields (false when
     they cannot hold it), ``read(node)`` the value to store (undefined: leave the key out,
     so the job's value or the default applies). A value the fields do not accept (text in
     a number) is still stored as typed, for the one validation path to name. */
  var KINDS = {
    codes: {
      show: function (node, value) {
        if (!Array.isArray(value) || !value.every(function (c) { return typeof c !== "object"; })) return false;
        valueInput(node).value = value.join(", ");
        return true;
      },
      read: function (node) {
        var text = valueInput(node).value.trim();
        if (!text) return undefined;
        return text.split(/[\s,]+/).filter(Boolean).map(function (code) {
          return /^\d+$/.test(code) ? Number(code) : code.toLowerCase();
        });
      },
    },
    text: {
      show: function (node, value) {
        if (typeof value !== "string") return false;
        valueInput(node).value = value;
        return true;
      },
      read: function (node) {
        return valueInput(node).value || undefined;
      },
    },
    scalar: {
      // Text that would read as another JSON value ("3", "true") shows in quotes.
      show: function (node, value) {
        if (value === null || typeof value === "object") return false;
        valueInput(node).value = typeof value === "string" && !parsed(value).ok ? value : JSON.stringify(value);
        return true;
      },
      read: function (node) {
        var text = valueInput(node).value;
        if (!text) return undefined;
        var json = parsed(text);
        return json.ok && (json.value === null || typeof json.value !== "object") ? json.value : text;
      },
    },
    json: {
      // The key's JSON as typed; text that is no JSON is sent as it is, so the one
      // validation path says what is wrong with it, beside this field.
      show: function (node, value) {
        valueInput(node).value = JSON.stringify(value);
        return true;
      },
      read: function (node) {
        var text = valueInput(node).value.trim();
        if (!text) return undefined;
        var json = parsed(text);
        return json.ok ? json.value : text;
      },
    },
    count: {
      show: function (node, value) {
        if (value === null && nullBox(node)) return (nullBox(node).checked = true);
        if (!isWhole(value)) return false;
        valueInput(node).value = String(value);
        return true;
      },
      read: function (node) {
        if (nullBox(node) && nullBox(node).checked) return null;
        var text = valueInput(node).value.trim();
        if (!text) return undefined;
        return Number(text);
      },
    },
    duration: {
      // Shown in the largest unit that holds it whole: 10000 ms as 10 s.
      show: function (node, value) {
        if (value === null && nullBox(node)) return (nullBox(node).checked = true);
        if (!isWhole(value)) return false;
        var unit = node.querySelector(".cc-unit");
        var options = Array.prototype.slice.call(unit.options).reverse();
        var fits = options.filter(function (o) { return value && value % Number(o.value) === 0; })[0];
        if (fits) unit.value = fits.value;
        valueInput(node).value = String(value / Number(unit.value));
        return true;
      },
      read: function (node) {
        if (nullBox(node) && nullBox(node).checked) return null;
        var text = valueInput(node).value.trim();
        if (!text) return undefined;
        return Math.round(Number(text) * Number(node.querySelector(".cc-unit").value));
      },
    },
    choice: {
      show: function (node, value) {
        var select = valueInput(node);
        var known = Array.prototype.some.call(select.options, function (o) { return o.value && o.value === value; });
        if (!known) return false;
        select.value = value;
        return true;
      },
      read: function (node) {
        return valueInput(node).value || undefined;
      },
    },
    overlap: {
      // "wait" or "skip", or {"allow": N}: the choice, and for allow how many at once.
      show: function (node, value) {
        var shown = isObject(value) && Object.keys(value).length === 1 && isWhole(value.allow);
        if (shown) {
          valueInput(node).value = "allow";
          node.querySelector(".cc-allow").value = String(value.allow);
        } else if (value === "allow" || !KINDS.choice.show(node, value)) {
          return false;
        }
        allowShown(node);
        return true;
      },
      read: function (node) {
        var choice = valueInput(node).value;
        if (choice !== "allow") return choice || undefined;
        var text = node.querySelector(".cc-allow").value.trim();
        return { allow: /^-?\d+$/.test(text) ? Number(text) : text };
      },
    },
    flag: {
      show: function (node, value) {
        if (typeof value !== "boolean") return false;
        valueInput(node).value = String(value);
        return true;
      },
      read: function (node) {
        var value = valueInput(node).value;
        return value ? value === "true" : undefined;
      },
    },
    moment: {
      show: function (node, value) {
        if (value === null) return true;
        var parts = typeof value === "string" && MOMENT.exec(value);
        if (!parts) return false;
        valueInput(node).value = parts[1];
        node.querySelector(".cc-offset").value = parts[2];
        return true;
      },
      read: function (node) {
        var local = valueInput(node).value;
        if (!local) return undefined;
        if (local.length === 16) local += ":00";
        return local + (node.querySelector(".cc-offset").value.trim() || "Z");
      },
    },
    windows: {
      show: function (node, value) {
        var days = daysOf(node);
        var shape = Array.isArray(value) && value.every(function (w) {
          return isObject(w) && typeof w.start === "string" && CLOCK.test(w.start) &&
            typeof w.end === "string" && CLOCK.test(w.end) &&
            Object.keys(w).every(function (k) { return ["start", "end", "days"].indexOf(k) >= 0; }) &&
            (w.days === undefined || (Array.isArray(w.days) && w.days.every(function (d) { return days.indexOf(d) >= 0; })));
        });
        if (!shape) return false;
        var rows = node.querySelector(".cc-rows");
        value.forEach(function (window) {
          var row = addRow(rows);
          row.querySelector(".cc-start").value = window.start;
          row.querySelector(".cc-end").value = window.end;
          (window.days || []).forEach(function (day) {
            row.querySelector('input[value="' + day + '"]').checked = true;
          });
        });
        return true;
      },
      read: function (node) {
        var rows = rowsOf(node.querySelector(".cc-rows"));
        var week = daysOf(node);
        if (!rows.length) return undefined;
        return rows.map(function (row) {
          var window = { start: row.querySelector(".cc-start").value, end: row.querySelector(".cc-end").value };
          var days = week.filter(function (day) { return row.querySelector('input[value="' + day + '"]').checked; });
          if (days.length) window.days = days;
          return window;
        });
      },
    },
  };

  function policyEditor(root) {
    var textarea = root.querySelector(".cc-raw textarea");
    var keys = Array.prototype.slice.call(root.querySelectorAll(".cc-key"));
    var byName = {};
    keys.forEach(function (node) { byName[node.dataset.key] = node; });
    var stored = {};
    var touched = {};
    var saved = savedErrors(root);

    function clear(node) {
      node.querySelectorAll("input, select").forEach(function (input) {
        input.disabled = false;
        if (input.type === "checkbox") input.checked = false;
        else if (input.tagName === "SELECT") input.selectedIndex = input.classList.contains("cc-unit") ? input.selectedIndex : 0;
        else input.value = "";
      });
      node.querySelectorAll("button").forEach(function (button) { button.disabled = false; });
      var rows = node.querySelector(".cc-rows");
      if (rows) rows.replaceChildren();
      node.querySelector(".cc-key-note").hidden = true;
      delete node.dataset.unshown;
      allowShown(node);
    }

    function nulled(node) {
      if (node.dataset.unshown) return;  // its inputs stay off: the value is kept as it is
      var box = nullBox(node);
      node.querySelectorAll(".cc-value, .cc-unit").forEach(function (input) {
        input.disabled = Boolean(box && box.checked);
      });
    }

    var kind = {
      fill: function () {
        var text = textarea.value.trim();
        var json = parsed(text || "{}");
        if (!json.ok) throw new Error("This is not JSON yet (" + json.error + "); fix it here to edit it with fields.");
        var policy = json.value === null ? {} : json.value;
        if (!isObject(policy)) throw new Error("A run policy is a JSON object; fix it here to edit it with fields.");
        var others = [];
        keys.forEach(clear);
        Object.keys(policy).forEach(function (name) {
          var node = byName[name];
          if (!node) return others.push(name);
          if (!KINDS[node.dataset.kind].show(node, policy[name])) {
            clear(node);
            var note = node.querySelector(".cc-key-note");
            note.textContent = "Stored as " + JSON.stringify(policy[name]).slice(0, 200) +
              ", which these fields cannot show; it is kept as it is (edit it as JSON).";
            note.hidden = false;
            node.dataset.unshown = "yes";
            node.querySelectorAll("input, select, button").forEach(function (input) { input.disabled = true; });
          }
          nulled(node);
        });
        keys.forEach(nulled);
        // Only the groups in use start open: seven headings, not seventeen fields.
        root.querySelectorAll(".cc-group").forEach(function (group) {
          group.open = Array.prototype.some.call(group.querySelectorAll(".cc-key"), function (node) {
            return node.dataset.key in policy;
          });
        });
        stored = policy;
        touched = {};
        if (others.length) {
          return "Kept as they are, without fields (edit them as JSON): " + others.join(", ") + ".";
        }
        return Object.keys(policy).length ? "" : root.dataset.empty;
      },
      input: function (target) {
        var node = target.closest(".cc-key");
        if (!node) return;
        touched[node.dataset.key] = true;
        nulled(node);
        allowShown(node);
      },
      write: function () {
        var policy = {};
        function put(name) {
          var value = touched[name] ? KINDS[byName[name].dataset.kind].read(byName[name]) : stored[name];
          if (value !== undefined) policy[name] = value;
        }
        Object.keys(stored).forEach(function (name) { if (byName[name] || !touched[name]) put(name); });
        keys.forEach(function (node) {
          var name = node.dataset.key;
          if (touched[name] && !(name in stored)) put(name);
        });
        textarea.value = JSON.stringify(policy);
      },
      shown: function (json) {
        // In fields mode the saved messages stand beside their fields, not above them all.
        saved.forEach(function (item) { item.hidden = !json && item.dataset.placed === "yes"; });
      },
    };

    root.addEventListener("click", function (event) {
      var button = event.target.closest("button");
      if (!button || button.disabled) return;
      var node = button.closest(".cc-key");
      if (!node) return;
      if (button.classList.contains("cc-add")) {
        addRow(node.querySelector(".cc-rows")).querySelector("input").focus();
      } else if (button.classList.contains("cc-remove")) {
        button.closest(".cc-window").remove();
      } else {
        return;
      }
      changed(node);
    });

    /* Each message of the one validation path starts with the key it is about (and a
       window's with its number): put it beside that key, and mark the window. */
    function place(messages) {
      keys.forEach(function (node) {
        node.querySelectorAll(".cc-invalid").forEach(function (row) { row.classList.remove("cc-invalid"); });
      });
      var byKey = {};
      var elsewhere = [];
      var placed = messages.map(function (message) {
        var parts = /^(?:With the job's defaults: )?([a-z_]+): ([\s\S]*)$/.exec(message);
        if (!parts || !byName[parts[1]]) {
          elsewhere.push(message);
          return false;
        }
        (byKey[parts[1]] = byKey[parts[1]] || []).push(parts[2]);
        var number = /^window (\d+):/.exec(parts[2]);
        var rows = byName[parts[1]].querySelector(".cc-rows");
        if (number && rows && rows.children[number[1] - 1]) rows.children[number[1] - 1].classList.add("cc-invalid");
        return true;
      });
      keys.forEach(function (node) {
        var mine = byKey[node.dataset.key] || [];
        showMessages(node.querySelector(".cc-key-errors"), mine);
        node.classList.toggle("cc-wrong", mine.length > 0);
        if (mine.length) node.closest(".cc-group").open = true;
      });
      showMessages(root.querySelector(".cc-policy-errors"), elsewhere);
      return placed;
    }

    var state = editor(root, kind);
    // The saved messages the fields do not name stay where the admin put them.
    var placed = place(saved.map(function (item) { return item.textContent; }));
    showMessages(root.querySelector(".cc-policy-errors"), []);
    saved.forEach(function (item, index) { item.dataset.placed = placed[index] ? "yes" : "no"; });
    kind.shown(state.json);

    // Each run preview answers with the messages a save would show: the newest win.
    document.addEventListener("cc:preview", function (event) {
      var errors = (event.detail.errors || []).filter(function (problem) { return problem.field === textarea.name; });
      var messages = errors.length ? errors[0].messages : [];
      saved.forEach(function (item) { item.hidden = !state.json; item.dataset.placed = "yes"; });
      place(messages);
    });
  }

  // --- headers -------------------------------------------------------------------------------

  function headersEditor(root) {
    var textarea = root.querySelector(".cc-raw textarea");
    var namesArea = document.getElementById(root.dataset.secretNames);
    var namesRow = namesArea && namesArea.closest(".form-row");
    var words = root.dataset.secretWords.split(", ");
    var rows = root.querySelector(".cc-rows");
    var errors = root.querySelector(".cc-key-errors");
    var declared = [];

    function looksSecret(name) {
      var lowered = name.toLowerCase();
      return words.some(function (word) { return lowered.indexOf(word) >= 0; });
    }

    function sync(row) {
      var name = row.querySelector(".cc-name").value;
      var box = row.querySelector(".cc-secret");
      var automatic = looksSecret(name);
      if (automatic) box.checked = true;
      box.disabled = automatic;
      box.parentNode.title = automatic ? "Secret anyway: its name looks like a credential." : "";
      row.querySelector(".cc-value").type = box.checked ? "password" : "text";
    }

    var kind = {
      fill: function () {
        var headers = parsed(textarea.value.trim() || "{}");
        var names = parsed((namesArea && namesArea.value.trim()) || "[]");
        var fine = headers.ok && (headers.value === null || isObject(headers.value)) &&
          Object.keys(headers.value || {}).every(function (n) { return typeof headers.value[n] === "string"; });
        if (!fine) throw new Error("The headers are not a JSON object of text values yet; fix them here to edit them as rows.");
        if (!names.ok || !Array.isArray(names.value) || !names.value.every(function (n) { return typeof n === "string"; })) {
          throw new Error("The secret header names are not a JSON list of names; fix them below to edit the headers as rows.");
        }
        declared = names.value;
        rows.replaceChildren();
        Object.keys(headers.value || {}).forEach(function (name) {
          var row = addRow(rows);
          row.querySelector(".cc-name").value = name;
          row.querySelector(".cc-value").value = headers.value[name];
          row.querySelector(".cc-secret").checked = declared.some(function (d) { return d.toLowerCase() === name.toLowerCase(); });
          sync(row);
        });
      },
      input: function (target) {
        var row = target.closest(".cc-header");
        if (row) sync(row);
      },
      write: function () {
        var headers = {};
        var secret = [];
        var twice = [];
        rowsOf(rows).forEach(function (row) {
          var name = row.querySelector(".cc-name").value.trim();
          var value = row.querySelector(".cc-value").value;
          if (!name && !value) return;
          if (Object.prototype.hasOwnProperty.call(headers, name)) twice.push(name);
          headers[name] = value;
          if (row.querySelector(".cc-secret").checked && !looksSecret(name)) {
            var before = declared.filter(function (d) { return d.toLowerCase() === name.toLowerCase(); })[0];
            secret.push(before || name);
          }
        });
        textarea.value = JSON.stringify(headers);
        if (namesArea) namesArea.value = JSON.stringify(secret);
        showMessages(errors, twice.map(function (name) {
          return name + " is given twice: only its last row is sent; remove one.";
        }));
      },
      shown: function (json) {
        // Its own row, unless a save left a message there to read.
        if (namesRow) namesRow.hidden = !json && !namesRow.classList.contains("errors");
      },
    };

    root.addEventListener("click", function (event) {
      var button = event.target.closest("button");
      if (!button) return;
      if (button.classList.contains("cc-add")) {
        sync(addRow(rows));
        rows.lastElementChild.querySelector(".cc-name").focus();
      } else if (button.classList.contains("cc-remove")) {
        button.closest(".cc-header").remove();
      } else {
        return;
      }
      kind.write();
      changed(rows);
    });
    editor(root, kind);
  }

  // --- a JSON body ---------------------------------------------------------------------------

  function jsonEditor(root) {
    var textarea = root.querySelector("textarea");
    var status = root.querySelector(".cc-json-status");

    function check() {
      var text = textarea.value.trim();
      var json = parsed(text);
      var fine = !text || json.ok;
      status.hidden = false;
      status.className = "cc-json-status " + (fine ? "cc-muted" : "errornote");
      status.textContent = !text ? "Empty: no body is sent." : fine ? "Valid JSON." :
        "Not valid JSON: " + json.error + ". Text goes in double quotes (\"ok\"); null sends no body.";
      textarea.setAttribute("aria-invalid", fine ? "false" : "true");
    }
    textarea.addEventListener("input", check);
    check();
  }

  var EDITORS = { policy: policyEditor, headers: headersEditor, json: jsonEditor };

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".cc-editable").forEach(function (root) {
      var start = EDITORS[root.dataset.editor];
      if (start) start(root);
    });
  });
})();
