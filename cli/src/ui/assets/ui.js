// Kuvryn Sync web view: live updates. The server sends a `change` event (server-sent events)
// after the watched objects change; the page fetches itself again and swaps its live region,
// keeping focus and scroll. No framework, no build step.
(function () {
  "use strict";
  const main = document.getElementById("main");
  const src = main && main.dataset.src;
  if (src) {
    // An action's answer: show the Application's own address, so a reload does not repeat it.
    history.replaceState(null, "", src);
  }
  const state = document.getElementById("live-state");
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const response = await fetch(location.href, { headers: { "Accept": "text/html" } });
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.getElementById("live"), live = document.getElementById("live");
      if (!fresh || !live) return;
      const focused = document.activeElement && document.activeElement.id;
      live.replaceWith(fresh);
      if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
      document.dispatchEvent(new CustomEvent("ksync:refreshed"));
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  if (window.EventSource) {
    const events = new EventSource("/live");
    events.addEventListener("change", refresh);
    events.onopen = () => { if (state) state.textContent = "live"; };
    events.onerror = () => { if (state) state.textContent = "reconnecting…"; };
  }
  // Filters apply as soon as a select changes, as well as with the button.
  document.querySelectorAll(".filters select").forEach((select) => {
    select.addEventListener("change", () => select.form.submit());
  });
})();
