// The mcpvisor console: one EventSource for live updates (the host pushes
// the re-rendered, already escaped fragment), the control buttons, the
// tool call forms and the missing-secret forms.
"use strict";

(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");
  const notice = document.getElementById("notice");

  // An update replaces the fragment; what the operator opened, typed or
  // got back is carried over by element id, so a push never collapses a
  // panel or wipes a half-filled form. A secret's value is never kept
  // (data-keep="no"): it is cleared with the form it was sent from.
  function snapshot() {
    const s = { open: new Set(), values: new Map(), results: new Map(), focus: null };
    live.querySelectorAll("details[open][id]").forEach(function (d) { s.open.add(d.id); });
    live.querySelectorAll("form[id]").forEach(function (f) {
      f.querySelectorAll("input, textarea, select").forEach(function (el) {
        if (el.type === "hidden") {
          return;
        }
        const key = f.id + "\u0000" + el.name + "\u0000" + el.dataset.type;
        s.values.set(key, el.type === "checkbox" ? el.checked : el.value);
        if (el === document.activeElement) {
          s.focus = key;
        }
      });
    });
    live.querySelectorAll("pre.result[id]").forEach(function (p) {
      s.results.set(p.id, { text: p.textContent, cls: p.className });
    });
    return s;
  }

  function restore(s) {
    s.open.forEach(function (id) {
      const d = document.getElementById(id);
      if (d) {
        d.open = true;
      }
    });
    live.querySelectorAll("form[id]").forEach(function (f) {
      f.querySelectorAll("input, textarea, select").forEach(function (el) {
        const key = f.id + "\u0000" + el.name + "\u0000" + el.dataset.type;
        if (!s.values.has(key)) {
          return;
        }
        if (el.type === "checkbox") {
          el.checked = s.values.get(key);
        } else {
          el.value = s.values.get(key);
        }
        if (key === s.focus) {
          el.focus();
        }
      });
    });
    s.results.forEach(function (r, id) {
      const p = document.getElementById(id);
      if (p) {
        p.textContent = r.text;
        p.className = r.cls;
      }
    });
  }

  const events = new EventSource("/ui/events");
  events.addEventListener("update", function (e) {
    const s = snapshot();
    live.innerHTML = e.data;
    restore(s);
    status.textContent = "live";
    status.className = "meta ok";
  });
  events.onerror = function () {
    // EventSource reconnects on its own after a dropped stream; a refused
    // one (503: too many consoles) closes for good.
    status.textContent = events.readyState === EventSource.CLOSED
      ? "live updates unavailable: reload the page later"
      : "reconnecting…";
    status.className = "meta bad";
  };

  document.addEventListener("click", async function (e) {
    const button = e.target.closest("button[data-action]");
    if (!button) {
      return;
    }
    const action = button.dataset.action;
    const server = button.dataset.server;
    button.disabled = true;
    notice.textContent = action + " " + server + ": sent…";
    try {
      const resp = await fetch("/control/" + action + "?server=" + encodeURIComponent(server),
        { method: "POST", credentials: "same-origin" });
      let text = "HTTP " + resp.status;
      try {
        const body = await resp.json();
        if (body.error) {
          text += ": " + body.error;
        } else if (body.server && body.server.state) {
          text += ": now " + body.server.state;
        }
      } catch (_) {
        text += ": " + resp.statusText;
      }
      notice.textContent = action + " " + server + ": " + text;
    } catch (err) {
      notice.textContent = action + " " + server + ": failed: " + err;
    } finally {
      button.disabled = false;
    }
  });

  // arguments builds a call's arguments from its form: each field typed
  // as the tool's input schema says; an empty optional field is left out.
  function callArguments(form) {
    const args = {};
    for (const el of form.querySelectorAll("[data-type]")) {
      const type = el.dataset.type;
      if (type === "arguments") {
        return JSON.parse(el.value || "{}");
      }
      if (type === "boolean") {
        args[el.name] = el.checked;
        continue;
      }
      if (el.value === "") {
        continue;
      }
      if (type === "number" || type === "integer") {
        args[el.name] = Number(el.value);
      } else if (type === "json") {
        args[el.name] = JSON.parse(el.value);
      } else {
        args[el.name] = el.value;
      }
    }
    return args;
  }

  async function post(url, init) {
    const resp = await fetch(url, Object.assign({ method: "POST", credentials: "same-origin" }, init));
    let body = {};
    try {
      body = await resp.json();
    } catch (_) {
      body = { error: "HTTP " + resp.status + " " + resp.statusText };
    }
    return { status: resp.status, body: body };
  }

  document.addEventListener("submit", async function (e) {
    const form = e.target;
    if (form.matches("form[data-call]")) {
      e.preventDefault();
      const out = form.querySelector("pre.result");
      let args;
      try {
        args = callArguments(form);
      } catch (err) {
        out.textContent = "the arguments are not valid JSON: " + err.message;
        out.className = "result bad";
        return;
      }
      out.textContent = "calling…";
      out.className = "result";
      try {
        const r = await post("/ui/call", {
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ tool: form.dataset.tool, arguments: args }),
        });
        if (r.body.error) {
          out.textContent = r.body.error;
          out.className = "result bad";
        } else {
          out.textContent = r.body.result;
          out.className = r.body.is_error ? "result bad" : "result ok";
        }
      } catch (err) {
        out.textContent = "failed: " + err;
        out.className = "result bad";
      }
      return;
    }
    if (form.matches("form[data-secret]")) {
      e.preventDefault();
      const data = new URLSearchParams(new FormData(form));
      const name = form.querySelector("input[name=name]").value;
      form.querySelector("input[name=value]").value = "";
      notice.textContent = "storing " + name + "…";
      try {
        const r = await post("/ui/secret", { body: data });
        notice.textContent = r.body.error
          ? "secret " + name + ": HTTP " + r.status + ": " + r.body.error
          : "stored " + name + "; started " + (r.body.restarted || []).join(", ");
      } catch (err) {
        notice.textContent = "secret " + name + ": failed: " + err;
      }
    }
  });
})();
