// The console's script: it keeps each page's running state current by
// fetching the page's live fragment (?partial=live) every few seconds and
// putting it in place, and asks for confirmation on dangerous forms. The
// pages work without it.
"use strict";
(function () {
  const every = 2000;
  const regions = document.querySelectorAll("[data-live]");
  async function refresh() {
    for (const el of regions) {
      // A region holding the keyboard focus is left alone, so a button
      // reached with Tab is not swapped out under the user.
      if (el.contains(document.activeElement)) continue;
      const url = new URL(window.location.href);
      url.searchParams.set("partial", el.dataset.live);
      try {
        const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
        if (r.ok) el.innerHTML = await r.text();
      } catch (e) {
        // Offline for a moment: the next round tries again.
      }
    }
    window.setTimeout(refresh, every);
  }
  if (regions.length > 0) window.setTimeout(refresh, every);
  document.addEventListener("submit", function (ev) {
    const msg = ev.target.dataset.confirm;
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });
})();
