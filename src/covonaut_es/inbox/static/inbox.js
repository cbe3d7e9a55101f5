// The inbox's one script (no inline script: the page's CSP forbids it).
"use strict";
// A form that ends something for good (rejecting, giving a thread up) asks first.
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});
// Live updates of the inbox: wait for the review queue to move, then fetch the rows
// again (server-rendered and escaped).
(function () {
  const queue = document.getElementById("queue");
  if (!queue) return;
  let position = queue.dataset.position;
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  async function follow() {
    for (;;) {
      try {
        const changed = await fetch(queue.dataset.changes + "?since=" + encodeURIComponent(position),
                                    { credentials: "same-origin" });
        if (!changed.ok) { await pause(2000); continue; }
        const next = String((await changed.json()).position);
        if (next === position) continue;
        const rows = await fetch(queue.dataset.rows, { credentials: "same-origin" });
        if (!rows.ok) { await pause(2000); continue; }
        queue.innerHTML = await rows.text();
        position = next;
      } catch (error) {
        await pause(2000);
      }
    }
  }
  follow();
})();
// The live status of an open review or pause page: each time the queue moves, ask the
// server (the authority) whether someone else dealt with it; once they did, show its
// server-rendered, escaped notice and disable and hide the page's forms (a submit would be
// refused anyway).
(function () {
  const region = document.getElementById("live-status");
  if (!region) return;
  let position = "";
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  async function follow() {
    for (;;) {
      try {
        const changed = await fetch(region.dataset.changes + "?since=" + encodeURIComponent(position),
                                    { credentials: "same-origin" });
        if (!changed.ok) { await pause(2000); continue; }
        const next = String((await changed.json()).position);
        if (next === position) continue;
        const status = await fetch(region.dataset.status, { credentials: "same-origin" });
        if (!status.ok) { await pause(2000); continue; }
        const fragment = document.createElement("template");
        fragment.innerHTML = await status.text();
        const shown = fragment.content.firstElementChild;
        position = next;
        if (!shown || shown.dataset.state === "pending") continue;
        document.querySelectorAll("section.actions, section.danger").forEach((forms) => {
          forms.querySelectorAll("button, input, textarea").forEach((c) => { c.disabled = true; });
          forms.hidden = true;
        });
        document.querySelectorAll("nav.next").forEach((nav) => nav.remove());
        region.replaceChildren(shown);
        return;
      } catch (error) {
        await pause(2000);
      }
    }
  }
  follow();
})();
