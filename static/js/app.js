// Behaviour every page shares, wired by data attributes (no inline scripts or handlers, so a
// strict Content-Security-Policy holds): copy buttons, the phone menu, selects that submit
// their form, the cluster's cost ticking between pushes, elapsed time and deadlines, and the
// header's balance refreshed whenever a live push arrives.
(function () {
  "use strict";

  function money(n) {
    return "$" + n.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (refused) { copied = false; } finally { document.body.removeChild(area); }
    return copied ? Promise.resolve() : Promise.reject(new Error("the browser refused to copy"));
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (button) {
      event.preventDefault();
      // A bare data-copy copies the element just before the button (the shown command).
      var source = button.previousElementSibling;
      var text = button.getAttribute("data-copy") || (source ? source.textContent : "");
      var label = button.textContent;
      function say(text, css) {
        button.textContent = text;
        button.classList.add(css);
        setTimeout(function () { button.textContent = label; button.classList.remove(css); }, 2500);
      }
      // The browser may refuse the clipboard (no permission, not focused): say so instead of
      // failing silently, and the text stays on the page to select by hand.
      copyText(text).then(function () { say("Copied", "copied"); },
                          function () { say("Copy failed: select the text", "copy-failed"); });
      return;
    }
    var toggle = event.target.closest("[data-menu-toggle]");
    if (toggle) {
      var open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      var menu = document.getElementById(toggle.getAttribute("aria-controls"));
      if (menu) menu.classList.toggle("open", open);
    }
  });

  document.addEventListener("change", function (event) {
    var select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) select.form.submit();
  });

  function duration(ms) {
    var s = Math.max(0, Math.round(ms / 1000)), m = Math.floor(s / 60), h = Math.floor(m / 60);
    if (h) return h + " h " + (m % 60) + " min";
    if (m) return m + " min " + (s % 60) + " s";
    return s + " s";
  }

  function cents(n) {
    return Math.round((n + Number.EPSILON) * 100) / 100;
  }

  // The live cost, by the server's rule (clusters/templatetags/cluster_pages.py cluster_cost):
  // the stopped machines' fixed cost plus each running machine's running total rounded to
  // cents. The time is the server's (data-at-ms) plus what this page measured since the figure
  // arrived, so this computer's clock does not matter; and a figure never goes down while the
  // cluster runs (a push rendered a moment before it arrived is a cent behind at most).
  var highest = {};
  function liveCost(el, now) {
    if (!el._arrived) el._arrived = now;
    var at = parseFloat(el.dataset.atMs) + (now - el._arrived);
    var total = parseFloat(el.dataset.ended);
    JSON.parse(el.dataset.running).forEach(function (group) {
      total += group[2] * cents(parseFloat(group[0]) * Math.max(0, at - group[1]) / 3600000);
    });
    var key = el.dataset.costKey;
    if (key) total = highest[key] = Math.max(total, highest[key] || 0);
    return total;
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-rate][data-cost]").forEach(function (el) {
      var rate = parseFloat(el.dataset.rate);
      if (!(rate > 0)) return;
      if (el.dataset.running) {
        var shown = money(liveCost(el, now));
        if (el.textContent !== shown) el.textContent = shown;
        return;
      }
      var since = (now - Date.parse(el.dataset.at)) / 3600000;
      el.textContent = money(parseFloat(el.dataset.cost) + rate * Math.max(0, since));
    });
    document.querySelectorAll("[data-elapsed-since]").forEach(function (el) {
      el.textContent = "started " + duration(now - Date.parse(el.dataset.elapsedSince)) + " ago";
    });
    document.querySelectorAll("[data-countdown-to]").forEach(function (el) {
      var left = Date.parse(el.dataset.countdownTo) - now;
      el.textContent = left > 0 ? duration(left) + " left" : "deadline reached";
    });
  }
  tick();
  setInterval(tick, 1000);
  // A pushed status card replaces the figure: tick before the browser paints it, so the
  // figure shown is never the push's older one.
  if (window.MutationObserver) {
    // Only a swapped-in figure counts: the tick's own text change must not tick again.
    new MutationObserver(function (changes) {
      for (var i = 0; i < changes.length; i++) {
        var added = changes[i].addedNodes;
        for (var j = 0; j < added.length; j++) {
          var node = added[j];
          if (node.nodeType === 1 && (node.matches("[data-running]") || node.querySelector("[data-running]"))) {
            tick();
            return;
          }
        }
      }
    }).observe(document.body, {childList: true, subtree: true});
  }

  // A live push means something changed (a cluster started billing, ended, …): the header's
  // balance and runway follow at once instead of at the next poll.
  document.addEventListener("htmx:wsAfterMessage", function () {
    if (window.htmx && document.getElementById("header-money")) window.htmx.trigger(document.body, "refresh-money");
    // Pushes append a node's new log lines; like the server's tail, a log keeps only its
    // last data-keep characters.
    document.querySelectorAll("pre.log[data-keep]").forEach(function (log) {
      var keep = parseInt(log.getAttribute("data-keep"), 10), text = log.textContent;
      if (keep > 0 && text.length > keep) log.textContent = text.slice(-keep);
    });
  });
})();

// The clusters list: a pushed row for a cluster this page does not show (created in another
// tab, by the CLI or the API, or filtered out) has nowhere to go. It is not handed to htmx,
// which would log htmx:oobErrorNoTarget in the console; the list is fetched again instead,
// with its own filter.
(function () {
  "use strict";
  var refreshing = false;
  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var row = /^\s*<tr id="(cluster-row-\d+)"/.exec(event.detail.message || "");
    if (!row || document.getElementById(row[1])) return;
    event.preventDefault();
    if (refreshing || !document.getElementById("cluster-list")) return;
    refreshing = true;
    window.htmx.ajax("GET", window.location.href, {target: "#cluster-list", select: "#cluster-list", swap: "outerHTML"})
      .finally(function () { refreshing = false; });
  });
})();

// <form data-confirm="Delete key …?">: ask first. The question is an escaped attribute and
// reaches window.confirm as a string, so a name typed by a user is never code. Capturing on
// the document runs before htmx's own submit listener on the form, so "no" stops both kinds
// of submit. Many forms asking one question (each node row's Replace) name a <template> that
// holds it once per page instead, <form data-confirm-with="ID" data-node=… data-address=…>,
// and its {node} and {address} are filled in from the form.
(function () {
  "use strict";
  function question(form) {
    var shared = form.getAttribute("data-confirm-with");
    if (shared === null) return form.getAttribute("data-confirm");
    var node = form.getAttribute("data-node") || "", address = form.getAttribute("data-address") || "";
    var template = document.getElementById(shared);
    if (!template) return "Replace " + node + "?";
    return template.content.textContent.trim().split("{node}").join(node).split("{address}").join(address);
  }
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var asked = form instanceof HTMLFormElement ? question(form) : null;
    if (asked !== null && !window.confirm(asked)) {
      event.preventDefault();
      event.stopPropagation();
    }
  }, true);
})();

// <a data-toggle-rows hx-get=… aria-controls="rows-id">: the billing page's cluster line opens
// to its machine rows and closes again instead of fetching them twice.
(function () {
  "use strict";
  document.addEventListener("htmx:beforeRequest", function (event) {
    var link = event.detail.elt;
    if (!link || !link.hasAttribute || !link.hasAttribute("data-toggle-rows")) return;
    var rows = document.getElementById(link.getAttribute("aria-controls"));
    if (rows && rows.children.length) {
      rows.replaceChildren();
      link.closest("tbody").classList.remove("open");
      event.preventDefault();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var link = event.detail.elt;
    if (link && link.hasAttribute && link.hasAttribute("data-toggle-rows")) link.closest("tbody").classList.add("open");
  });
})();
