// The create form: price the picked offer for the count, grey out offers that cannot start
// that many machines, keep Kubernetes off container offers, warn about a missing SSH key and
// about money that covers less than an hour. The server checks every rule again on submit.
(function () {
  "use strict";
  var form = document.getElementById("create-form");
  if (!form) return;
  var offer = document.getElementById("id_offer");
  var machines = document.getElementById("id_machines");
  var estimate = document.getElementById("cluster-price-estimate");
  var freeNote = document.getElementById("offer-free");
  var runway = document.getElementById("runway-warning");
  var community = document.getElementById("community-warning");
  var k8s = form.querySelector("input[name=software][value=kubernetes]");
  var k8sNote = document.getElementById("kubernetes-note");
  var keyWarning = document.getElementById("no-key-warning");
  var keys = form.querySelectorAll("input[name=ssh_keys]");
  var volume = document.getElementById("id_volume");
  // The bounds come from the server (offers.models.MIN_MACHINES/MAX_MACHINES), never restated here.
  var minMachines = parseInt(form.dataset.minMachines, 10), maxMachines = parseInt(form.dataset.maxMachines, 10);
  var money = function (n) {
    return "$" + n.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
  };

  function picked() {
    return offer && offer.options[offer.selectedIndex];
  }

  function count() {
    var n = parseInt(machines && machines.value, 10);
    return n >= minMachines && n <= maxMachines ? n : null;
  }

  function update() {
    var option = picked(), n = count();
    if (offer) {
      Array.prototype.forEach.call(offer.options, function (o) {
        var free = parseInt(o.dataset.free, 10);
        o.disabled = n !== null && !isNaN(free) && free < n && o !== option;
      });
    }
    if (!option || !option.dataset.price) return;
    var price = parseFloat(option.dataset.price), free = parseInt(option.dataset.free, 10);
    if (n === null) {
      estimate.textContent = money(price) + "/h per machine · enter " + minMachines + " to " + maxMachines +
        " machines for the cluster's price";
    } else {
      estimate.textContent = money(price * n) + "/h for the whole cluster (" + money(price) + "/h per machine × " + n + ")";
    }
    freeNote.textContent = isNaN(free) ? "" : (n !== null && free < n
      ? "Only " + free + " machines of this offer are free now: pick fewer machines or another offer."
      : free + " machines of this offer are free now.");
    community.hidden = option.dataset.community !== "1";
    if (volume) {
      volume.disabled = option.dataset.community === "1";
      if (volume.disabled) volume.value = "";
    }
    var noK8s = option.dataset.kubernetes === "0";
    if (k8s) {
      k8s.disabled = noK8s;
      if (noK8s && k8s.checked) {
        k8s.checked = false;
        var none = form.querySelector("input[name=software][value=none]");
        if (none) none.checked = true;
      }
    }
    if (k8sNote) k8sNote.hidden = !noK8s;
    warnRunway(n === null ? null : price * n);
  }

  function warnRunway(clusterPrice) {
    if (clusterPrice === null) { runway.hidden = true; return; }
    var rate = clusterPrice + parseFloat(form.dataset.burn || "0");
    var balanceHours = parseFloat(form.dataset.balance) / rate;
    var budgetLeft = parseFloat(form.dataset.budgetLeft);
    var messages = [];
    if (balanceHours < 1) {
      messages.push("With this cluster the workspace would spend " + money(rate) + "/h and the balance of " +
        money(parseFloat(form.dataset.balance)) + " lasts " + Math.max(0, Math.round(balanceHours * 60)) +
        " minutes: every cluster is stopped when it runs out. Top up first.");
    }
    if (budgetLeft < clusterPrice) {
      messages.push("The environment has " + money(budgetLeft) + " left of its monthly budget, less than one hour " +
        "of this cluster (" + money(clusterPrice) + "/h): it is stopped when the budget is reached.");
    }
    runway.textContent = messages.join(" ");
    runway.hidden = messages.length === 0;
  }

  function warnKeys() {
    if (!keyWarning || !keys.length) return;
    keyWarning.hidden = Array.prototype.some.call(keys, function (k) { return k.checked; });
  }

  if (offer) offer.addEventListener("change", update);
  if (machines) machines.addEventListener("input", update);
  Array.prototype.forEach.call(keys, function (k) { k.addEventListener("change", warnKeys); });
  update();
  warnKeys();
})();
