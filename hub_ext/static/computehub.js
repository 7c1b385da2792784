// ComputeHub pages: edits go to the REST API with fetch; its error messages are shown on the page.
(function () {
  "use strict";

  var FLASH_KEY = "computehub-flash";
  var api = document.body.dataset.api;
  var meta = document.querySelector('meta[name="xsrf-token"]');
  var xsrf = meta ? meta.content : "";

  function flash(kind, text) {
    var el = document.getElementById("flash");
    if (!el) return;
    el.className = "flash " + kind;
    el.textContent = text;
  }

  function status(where, kind, text) {
    var out = where && where.querySelector("output.form-status");
    if (out) {
      out.className = "form-status " + kind;
      out.textContent = text;
    }
  }

  // Say it after the reload that shows the new state.
  function doneAndReload(text) {
    try { sessionStorage.setItem(FLASH_KEY, text); } catch (e) { /* private mode: just reload */ }
    window.location.reload();
  }

  async function call(method, path, payload) {
    var resp;
    try {
      resp = await fetch(api + path, {
        method: method,
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "Accept": "application/json", "X-XSRFToken": xsrf },
        body: payload === undefined ? undefined : JSON.stringify(payload)
      });
    } catch (e) {
      throw new Error("could not reach the ComputeHub service (" + e.message + ")");
    }
    var data = null;
    try { data = await resp.json(); } catch (e) { /* not JSON */ }
    if (!resp.ok) {
      var msg = (data && data.message) || resp.statusText || "request failed";
      var code = (data && data.error) || "error";
      throw new Error(resp.status + " " + code + ": " + msg);
    }
    return data;
  }

  async function run(container, buttons, method, path, payload, doneText) {
    buttons.forEach(function (b) { b.disabled = true; });
    status(container, "", "Saving…");
    try {
      await call(method, path, payload);
      doneAndReload(doneText);
    } catch (e) {
      var text = "Not saved. " + e.message;
      status(container, "error", text);
      flash("error", text);
      buttons.forEach(function (b) { b.disabled = false; });
    }
  }

  // A number field: empty means "not set"; anything else goes to the API as typed (it validates).
  function numberOrRaw(raw) {
    raw = raw.trim();
    if (raw === "") return null;
    var n = Number(raw);
    return Number.isFinite(n) ? n : raw;
  }

  // Empty removes the entry; 0 removes a guarantee (nothing guaranteed) but is a real limit.
  function setOrDelete(vec, key, value, zeroIsSet) {
    if (value === null || (value === 0 && !zeroIsSet)) delete vec[key]; else vec[key] = value;
    return vec;
  }

  function quotaBody(form) {
    var f = form.elements;
    var body = {
      guaranteed: setOrDelete(JSON.parse(form.dataset.guaranteed || "{}") || {}, "gpu", numberOrRaw(f.guaranteed_gpu.value)),
      limit: setOrDelete(JSON.parse(form.dataset.limit || "{}") || {}, "gpu", numberOrRaw(f.limit_gpu.value), true),
      user_limit: setOrDelete(JSON.parse(form.dataset.userLimit || "{}") || {}, "gpu",
                              numberOrRaw(f.user_limit_gpu.value), true)
    };
    var w = numberOrRaw(f.weight.value);
    if (w !== null) body.weight = w;
    return body;
  }

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (form.classList.contains("quota-form")) {
      ev.preventDefault();
      var q = form.dataset.queue;
      run(form, form.querySelectorAll("button"), "PATCH", "queues/" + encodeURIComponent(q), quotaBody(form),
          "Saved the quotas of queue " + q + ".");
    } else if (form.classList.contains("decide-form")) {
      ev.preventDefault();
      var approve = form.dataset.decision === "approve";   // the reject form holds the reason field
      var id = form.dataset.id;
      var reason = approve ? "" : form.elements.reason.value.trim();
      var decide = form.closest(".decide") || form;   // both decisions wait while one is sent
      if (form.dataset.array) {   // a job array's tasks: all of them, in one request
        var arrayBody = { action: approve ? "approve" : "reject" };
        if (reason) arrayBody.reason = reason;
        run(form, decide.querySelectorAll("button"), "POST", "workloads/" + encodeURIComponent(id) + "/array-action",
            arrayBody, (approve ? "Approved " : "Rejected ") + form.dataset.array + " tasks of array " + id + ".");
        return;
      }
      var body = { approve: approve };
      if (!approve) body.reason = reason;
      run(form, decide.querySelectorAll("button"), "POST", "approvals/" + encodeURIComponent(id), body,
          (approve ? "Approved " : "Rejected ") + id + ".");
    }
  });

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-api-method]");
    if (!b) return;
    ev.preventDefault();
    run(b.parentElement, [b], b.dataset.apiMethod, b.dataset.apiPath, JSON.parse(b.dataset.apiBody || "null") || undefined,
        b.dataset.done || "Done.");
  });

  // Times are rendered in UTC; show the reader's local time on hover.
  document.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (!isNaN(d)) t.title = (t.title ? t.title + " · " : "") + d.toLocaleString();
  });

  var saved = null;
  try { saved = sessionStorage.getItem(FLASH_KEY); sessionStorage.removeItem(FLASH_KEY); } catch (e) { /* ignore */ }
  // After the reload: a moment after load, so screen readers have seen the (empty) region first.
  if (saved) setTimeout(function () { flash("ok", saved); }, 150);
})();
