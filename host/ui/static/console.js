// The mcpvisor console: one EventSource for live updates (the host pushes
// the re-rendered, already escaped fragment) and the control buttons.
"use strict";

(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");
  const notice = document.getElementById("notice");

  const events = new EventSource("/ui/events");
  events.addEventListener("update", function (e) {
    live.innerHTML = e.data;
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
})();
