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
