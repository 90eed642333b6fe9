// The cluster page's metric charts: small multiples per node drawn by the vendored uPlot,
// started from GET …/metrics.json and moved by each round's points, which arrive over the
// page's socket as the hidden #metrics-push element (data-payload). No inline script: the
// page's Content-Security-Policy allows script from static files only.
(function () {
  "use strict";
  const charts = document.getElementById("metrics-charts");
  if (!charts || typeof uPlot === "undefined") return;
  let windowSeconds = parseInt(charts.dataset.window || "900", 10);
  const basePanels = [
    { title: "CPU / memory %", fields: ["cpu_percent", "memory_percent"], labels: ["CPU", "Memory"], max: 100 },
    { title: "Disk %", fields: ["root_percent", "shared_percent"], labels: ["/", "/shared"], max: 100 },
    { title: "wg0 Mbit/s", fields: ["net_rx_bps", "net_tx_bps"], labels: ["in", "out"], scale: 1e-6 },
  ];
  // Shown for a node once it reports GPU figures (machines without nvidia-smi report none).
  const gpuPanels = [
    { title: "GPU util / memory %", fields: ["gpu_percent", "gpu_memory_percent"], labels: ["util", "memory"], max: 100 },
    { title: "GPU °C / errors", fields: ["gpu_temperature_c", "gpu_errors"], labels: ["°C", "errors"] },
  ];
  const colours = ["#2563eb", "#db2777"];
  const nodes = {}; // name -> {points: [], plots: [uPlot], panels: [...], gpu: bool}

  function hasGpu(points) {
    return points.some((p) => p.gpu_percent != null || p.gpu_temperature_c != null);
  }

  function withDerived(point) {
    if (point.gpu_memory_total_bytes && point.gpu_memory_used_bytes != null) {
      point.gpu_memory_percent = (100 * point.gpu_memory_used_bytes) / point.gpu_memory_total_bytes;
    }
    return point;
  }

  function width() {
    const column = charts.clientWidth < 640 ? charts.clientWidth : charts.clientWidth / 3;
    return Math.max(200, Math.floor(column) - 16);
  }

  // Times as the rest of the page gives them: UTC, 24-hour.
  function utc(seconds) {
    return uPlot.tzDate(new Date(seconds * 1e3), "Etc/UTC");
  }
  const clock = uPlot.fmtDate("{HH}:{mm}");
  const dayAndClock = uPlot.fmtDate("{MM}-{DD} {HH}:{mm}");
  const stamp = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}");

  // The x axis spans the window picked (15 min … 7 days), ending at the newest figure or now,
  // not just the time the figures cover; y starts at 0 so a quiet line does not look busy.
  function timeRange() {
    let newest = 0;
    for (const name of Object.keys(nodes)) {
      const points = nodes[name].points;
      if (points.length) newest = Math.max(newest, points[points.length - 1].at);
    }
    const end = newest || Date.now() / 1000;
    return [end - windowSeconds, end];
  }

  // An axis as wide as its longest label (uPlot's own recipe), so no label is cut (".004").
  function axisSize(self, values, axisIdx, cycleNum) {
    const axis = self.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
    if (longest) {
      self.ctx.font = axis.font[0];
      size += self.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.ceil(size);
  }

  function timeLabelRoom(self) {
    const axis = self.axes[0];
    const sample = windowSeconds > 86400 ? "00-00 00:00" : "00:00";
    self.ctx.font = axis.font[0];
    return Math.ceil(self.ctx.measureText(sample).width / (window.devicePixelRatio || 1) / 2) + 2;
  }

  function dataFor(points, panel) {
    const xs = points.map((p) => p.at);
    const ys = panel.fields.map((f) => points.map((p) => (p[f] == null ? null : p[f] * (panel.scale || 1))));
    return [xs, ...ys];
  }

  function ensureNode(name, gpu) {
    const existing = nodes[name];
    if (existing && (existing.gpu || !gpu)) return existing;
    const block = document.createElement("div");
    block.className = "metric-node";
    block.id = "metrics-node-" + name;
    const heading = document.createElement("h3");
    heading.textContent = name;
    block.appendChild(heading);
    const row = document.createElement("div");
    row.className = "metric-row";
    block.appendChild(row);
    const old = document.getElementById(block.id);
    if (old) old.replaceWith(block); else charts.appendChild(block);
    const panels = gpu ? basePanels.concat(gpuPanels) : basePanels;
    const entry = { points: existing ? existing.points : [], plots: [], panels: panels, gpu: gpu };
    for (const panel of panels) {
      const cell = document.createElement("div");
      cell.className = "metric-chart";
      row.appendChild(cell);
      const time = { label: "UTC", value: (u, ts) => (ts == null ? "—" : stamp(utc(ts))) };
      const series = [time].concat(panel.fields.map((f, i) => ({ label: panel.labels[i], stroke: colours[i], width: 1.5 })));
      const opts = {
        title: panel.title, width: width(), height: 120, series: series, legend: { show: true },
        tzDate: utc,
        // Room on the right for half the newest time label, centred on the chart's last tick
        // ("12-06 00:00" was cut to "12-06 00:0").
        padding: [null, timeLabelRoom, null, null],
        scales: {
          x: { time: true, range: timeRange },
          y: { range: panel.max ? [0, panel.max] : (u, min, max) => [0, max > 0 ? max * 1.1 : 1] },
        },
        axes: [
          {
            size: 28, space: () => (windowSeconds > 86400 ? 90 : 50),
            values: (u, splits) => splits.map((s) => (windowSeconds > 86400 ? dayAndClock : clock)(utc(s))),
          },
          { size: axisSize },
        ],
      };
      const plot = new uPlot(opts, dataFor([], panel), cell);
      cell.plot = plot; // what a browser test reads back (the axes as drawn)
      entry.plots.push(plot);
    }
    if (existing) existing.plots.forEach((p) => p.destroy());
    nodes[name] = entry;
    return entry;
  }

  function redraw(name) {
    const entry = nodes[name];
    const newest = entry.points.length ? entry.points[entry.points.length - 1].at : 0;
    entry.points = entry.points.filter((p) => p.at > newest - windowSeconds);
    entry.plots.forEach((plot, i) => plot.setData(dataFor(entry.points, entry.panels[i])));
  }

  function add(name, points) {
    points = points.map(withDerived);
    const entry = ensureNode(name, hasGpu(points));
    const last = entry.points.length ? entry.points[entry.points.length - 1].at : 0;
    for (const point of points) if (point.at > last) entry.points.push(point);
    redraw(name);
  }

  // The window's series from the server: its own samples within the last hour, 5-minute
  // averages beyond it (the fine ones are kept an hour). A later window's answer wins.
  let asked = 0;
  function load() {
    const ask = ++asked;
    fetch(charts.dataset.seriesUrl + "?seconds=" + windowSeconds, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : { nodes: {} }))
      .then((body) => {
        if (ask !== asked) return;
        for (const name of Object.keys(nodes)) nodes[name].points = [];
        for (const name of Object.keys(body.nodes)) add(name, body.nodes[name]);
        for (const name of Object.keys(nodes)) redraw(name);
        const note = document.getElementById("metrics-resolution");
        if (note) note.textContent = body.resolution === "coarse" ? "5-minute averages" : "";
        charts.dataset.points = String(Object.values(nodes).reduce((sum, entry) => sum + entry.points.length, 0));
        charts.dataset.window = String(windowSeconds);
        charts.dataset.loaded = String(Date.now());
      });
  }
  load();
  for (const button of document.querySelectorAll(".metric-windows button[data-window]")) {
    button.addEventListener("click", () => {
      windowSeconds = parseInt(button.dataset.window, 10);
      for (const other of document.querySelectorAll(".metric-windows button[data-window]")) {
        other.setAttribute("aria-pressed", other === button ? "true" : "false");
      }
      load();
    });
  }

  let lastPayload = "";
  function takePush() {
    const push = document.getElementById("metrics-push");
    const payload = push && push.dataset.payload;
    if (!payload || payload === lastPayload) return;
    lastPayload = payload;
    const round = JSON.parse(payload);
    const byNode = {};
    for (const point of round.points) (byNode[point.node] = byNode[point.node] || []).push(point);
    for (const name of Object.keys(byNode)) add(name, byNode[name]);
    charts.dataset.updated = String(Date.now());
  }
  new MutationObserver(takePush).observe(document.getElementById("metrics-card"), { childList: true, subtree: true });
  window.addEventListener("resize", () => {
    for (const name of Object.keys(nodes)) nodes[name].plots.forEach((p) => p.setSize({ width: width(), height: 120 }));
  });
})();
