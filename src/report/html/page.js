// soak's report page: draws every series of every cell with uPlot, the
// events as lines and the phases as bands on them, one row a measure and
// one column a cell (the same axes across cells), all charts zoomed and
// panned together. The data is the JSON of report/html/data.rs, gzipped
// in the page (a report) or fetched from the run (the live dashboard).
"use strict";
(function () {
  const CLASS_COLOURS = { fault: "#d62728", recovery: "#2ca02c", finding: "#7a0019", info: "#9a9a9a" };
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const soak = (window.soak = { charts: [], errors: [], marksDrawn: 0, range: null, data: null, rendered: false, ymax: {} });
  window.addEventListener("error", (e) => soak.errors.push(String(e.message)));
  window.addEventListener("unhandledrejection", (e) => soak.errors.push(String(e.reason)));

  // ---- numbers ----
  function bytes(v) {
    if (v == null) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let x = Math.abs(v);
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return (v < 0 ? "-" : "") + (i === 0 ? x.toFixed(0) : x.toFixed(1)) + " " + units[i];
  }
  function compact(v) {
    if (v == null) return "";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(a >= 100 ? 0 : 2);
  }
  function seconds(s) {
    if (s == null) return "";
    if (Math.abs(s) < 120) return s.toFixed(s < 10 ? 1 : 0) + " s";
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = Math.floor(s % 60);
    return h > 0 ? h + "h " + String(m).padStart(2, "0") + "m" : m + "m " + String(r).padStart(2, "0") + "s";
  }
  const FORMAT = {
    bytes,
    per_second: (v) => (v == null ? "" : compact(v) + "/s"),
    millis: (v) => (v == null ? "" : (v >= 100 ? v.toFixed(0) : v.toFixed(2)) + " ms"),
    share: (v) => (v == null ? "" : (100 * v).toFixed(1) + "%"),
    number: compact,
  };

  // ---- data ----
  async function unpack(b64) {
    const raw = atob(b64.trim());
    const buf = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) buf[i] = raw.charCodeAt(i);
    const stream = new Blob([buf]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }
  // A series' points: [times in s, values].
  function decode(s) {
    const n = s.t.length, xs = new Float64Array(n), ys = new Array(n);
    let t = 0, v = 0;
    for (let i = 0; i < n; i++) {
      t += s.t[i]; v += s.v[i];
      xs[i] = t / 1000; ys[i] = v / s.scale;
    }
    return [Array.from(xs), ys];
  }
  // The group's table for uPlot: one x column, a y column a series.
  function table(group) {
    // Decoded once per message: the y range and the chart both read it.
    if (group._table) return group._table;
    group._table = joined(group);
    return group._table;
  }
  function joined(group) {
    const cols = group.series.map(decode);
    if (cols.length === 1) return cols[0];
    const same = cols.every((c) => c[0].length === cols[0][0].length && c[0][c[0].length - 1] === cols[0][0][cols[0][0].length - 1]);
    if (same) return [cols[0][0], ...cols.map((c) => c[1])];
    return uPlot.join(cols);
  }
  // Stacked: each kind on the ones before it; drawn from the top down so
  // that every band keeps its colour. The legend shows each kind's own.
  function stack(t) {
    const out = [t[0]];
    let acc = t[0].map(() => 0);
    const sums = [];
    for (let i = 1; i < t.length; i++) {
      acc = acc.map((a, j) => (t[i][j] == null ? a : a + t[i][j]));
      sums.push(acc.slice());
    }
    return out.concat(sums.reverse());
  }

  // ---- events on the charts ----
  function drawPhases(u) {
    const cell = u.soakCell;
    if (!cell || !cell.phases.length) return;
    const ctx = u.ctx, { top, height } = u.bbox;
    ctx.save();
    cell.phases.forEach((p, i) => {
      const x0 = u.valToPos(p.start, "x", true), x1 = u.valToPos(p.end, "x", true);
      ctx.fillStyle = i % 2 ? "rgba(0,0,0,0.035)" : "rgba(31,119,180,0.05)";
      ctx.fillRect(x0, top, Math.max(1, x1 - x0), height);
    });
    ctx.restore();
  }
  function drawMarks(u) {
    const cell = u.soakCell;
    if (!cell) return;
    const ctx = u.ctx, { top, height } = u.bbox;
    const min = u.scales.x.min, max = u.scales.x.max;
    ctx.save();
    ctx.lineWidth = Math.max(1, devicePixelRatio);
    for (const m of cell.marks) {
      if (m.t < min || m.t > max) continue;
      const x = Math.round(u.valToPos(m.t, "x", true));
      ctx.strokeStyle = CLASS_COLOURS[m.class] || "#999";
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
      soak.marksDrawn++;
    }
    if (u.soakLimit) {
      const y = Math.round(u.valToPos(u.soakLimit, "y", true));
      if (y >= top) {
        ctx.setLineDash([6, 4]); ctx.strokeStyle = "#555";
        ctx.beginPath(); ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y); ctx.stroke();
      }
    }
    ctx.restore();
  }
  // The hover: the events within a few pixels of the pointer, and the phase.
  function hover(u) {
    const tip = u.soakTip, cell = u.soakCell, left = u.cursor.left;
    if (!tip || !cell || left == null || left < 0) { if (tip) tip.style.display = "none"; return; }
    const t = u.posToVal(left, "x");
    const near = cell.marks.filter((m) => Math.abs(u.valToPos(m.t, "x") - left) <= 5);
    const phase = cell.phases.find((p) => p.start <= t && t <= p.end);
    if (!near.length && !phase) { tip.style.display = "none"; return; }
    const lines = near.slice(0, 6).map((m) => `<b class="${m.class}">${esc(m.kind)}</b> at ${seconds(m.t)}: ${esc(m.text)}`);
    if (near.length > 6) lines.push(`… and ${near.length - 6} more`);
    if (phase) lines.push(`phase <i>${esc(phase.name)}</i> (${seconds(phase.start)} to ${seconds(phase.end)})`);
    tip.innerHTML = lines.join("<br>");
    tip.style.display = "block";
    tip.style.left = Math.min(left + 12, u.bbox.width / devicePixelRatio - 260) + "px";
    tip.style.top = "4px";
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }

  // ---- zoom and pan, every chart together ----
  let syncing = false;
  function setRange(min, max, from) {
    if (!(max > min)) return;
    soak.range = [min, max];
    syncing = true;
    for (const u of soak.charts) if (u !== from) u.setScale("x", { min, max });
    syncing = false;
    const el = document.getElementById("range");
    if (el) el.textContent = `Showing ${seconds(min)} to ${seconds(max)} of ${seconds(soak.end)}.`;
    if (!soak.live) history.replaceState(null, "", `#zoom=${min.toFixed(3)},${max.toFixed(3)}`);
  }
  soak.zoom = (min, max) => setRange(Math.max(min, soak.start), Math.min(max, soak.end));
  soak.reset = () => setRange(soak.start, soak.end);
  function onScale(u, key) {
    if (key === "x" && !syncing) setRange(u.scales.x.min, u.scales.x.max, u);
  }
  function wheel(u, e) {
    e.preventDefault();
    const [min, max] = soak.range || [u.scales.x.min, u.scales.x.max];
    const w = max - min;
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      const d = (e.shiftKey ? e.deltaY : e.deltaX) > 0 ? 0.1 * w : -0.1 * w;
      pan(d);
      return;
    }
    const at = u.posToVal(e.offsetX, "x");
    const f = e.deltaY < 0 ? 0.75 : 1 / 0.75;
    soak.zoom(at - (at - min) * f, at + (max - at) * f);
  }
  function pan(d) {
    const [min, max] = soak.range;
    const w = max - min;
    let a = min + d;
    a = Math.max(soak.start, Math.min(a, soak.end - w));
    setRange(a, a + w);
  }
  document.addEventListener("keydown", (e) => {
    if (!soak.range || e.target.tagName === "INPUT") return;
    const w = soak.range[1] - soak.range[0];
    if (e.key === "ArrowLeft") pan(-0.1 * w);
    else if (e.key === "ArrowRight") pan(0.1 * w);
  });

  // ---- the charts ----
  function width(cols) {
    const all = document.getElementById("plots").clientWidth || 1000;
    return Math.max(320, Math.floor(all / cols) - 16);
  }
  function yMax(groups, limit) {
    let max = 0;
    for (const g of groups) {
      if (!g) continue;
      const t = g.stacked ? stack(table(g)).slice(0, 2) : table(g);
      for (let i = 1; i < t.length; i++) for (const v of t[i]) if (v != null && v > max) max = v;
    }
    if (limit && limit < 2 * max) max = Math.max(max, limit);
    return max > 0 ? max * 1.05 : 1;
  }
  // A series has the same colour in every cell's chart of a group (a kind
  // one cell lacks does not shift the others').
  const colours = {};
  function colourOf(group, label) {
    const g = (colours[group] = colours[group] || {});
    if (!(label in g)) g[label] = PALETTE[Object.keys(g).length % PALETTE.length];
    return g[label];
  }
  // One row's y range: the same for every cell.
  function rowMax(cells, id) {
    const groups = cells.map((c) => c.groups.find((g) => g.id === id));
    const max = yMax(groups, id === "memory" ? Math.max(0, ...cells.map((c) => c.limit_bytes || 0)) : 0);
    soak.ymax[id] = max;
    return max;
  }
  function chart(el, cell, group, ymax, w) {
    const fmt = FORMAT[group.unit] || compact;
    let data = table(group);
    const raw = data;
    if (group.stacked) data = stack(data);
    const n = group.series.length;
    const series = [{ label: "time", value: (u, v) => seconds(v) }];
    group.series.forEach((s, i) => {
      const k = group.stacked ? n - 1 - i : i;
      const real = group.stacked ? group.series[k] : s;
      const colour = colourOf(group.id, real.label);
      series.push({
        label: real.label,
        stroke: colour,
        width: 1,
        spanGaps: true,
        fill: group.stacked ? colour + "aa" : undefined,
        paths: real.steps ? uPlot.paths.stepped({ align: 1 }) : undefined,
        points: { show: false },
        value: group.stacked ? (u, v, si, idx) => (idx == null ? "" : fmt(raw[k + 1][idx])) : (u, v) => fmt(v),
      });
    });
    const opts = {
      width: w,
      height: 230,
      scales: { x: { time: false }, y: { range: () => [0, soak.ymax[group.id] || ymax] } },
      axes: [
        { values: (u, vals) => vals.map(seconds), size: 36 },
        { values: (u, vals) => vals.map(fmt), size: 78 },
      ],
      series,
      // A double click shows the whole run, in place of uPlot's own, which
      // fits the chart to its data (a latency series ends at its last
      // request, before the run does).
      cursor: {
        sync: { key: "soak" }, drag: { x: true, y: false }, points: { show: false },
        bind: { dblclick: () => () => soak.reset() },
      },
      legend: { live: true },
      hooks: { drawClear: [drawPhases], draw: [drawMarks], setScale: [onScale], setCursor: [hover] },
    };
    const u = new uPlot(opts, data, el);
    u.soakCell = cell;
    u.soakCellId = cell.id;
    u.soakGroupId = group.id;
    if (group.id === "memory" && cell.limit_bytes) u.soakLimit = cell.limit_bytes;
    const tip = document.createElement("div");
    tip.className = "tip";
    u.over.appendChild(tip);
    u.soakTip = tip;
    u.over.addEventListener("wheel", (e) => wheel(u, e), { passive: false });
    u.over.addEventListener("mouseleave", () => (tip.style.display = "none"));
    soak.charts.push(u);
    return u;
  }
  // One row a group, one column a cell; the node's own figures folded
  // and drawn when opened.
  function rows(cells, ids, into) {
    const cols = Math.min(cells.length, 3);
    const w = width(cols);
    for (const id of ids) {
      const groups = cells.map((c) => c.groups.find((g) => g.id === id));
      const first = groups.find((g) => g);
      const row = document.createElement("div");
      row.className = "row";
      row.dataset.group = id;
      row.innerHTML = `<h3>${esc(first.title)}</h3>`;
      const grid = document.createElement("div");
      grid.className = "grid";
      grid.style.gridTemplateColumns = `repeat(${cols}, 1fr)`;
      row.appendChild(grid);
      into.appendChild(row);
      const ymax = rowMax(cells, id);
      cells.forEach((c, i) => {
        const box = document.createElement("div");
        box.className = "plot";
        box.dataset.cell = c.id;
        box.innerHTML = `<div class="label"><code>${esc(c.id)}</code> <span class="${c.verdict}">${c.verdict}</span></div>`;
        grid.appendChild(box);
        if (groups[i]) chart(box, c, groups[i], ymax, w);
        else box.insertAdjacentHTML("beforeend", '<p class="none">no such series</p>');
      });
    }
  }
  function render(data) {
    soak.data = data;
    soak.live = data.live;
    soak.start = 0;
    soak.end = Math.max(1, ...data.cells.map((c) => c.end));
    const plots = document.getElementById("plots");
    plots.textContent = "";
    soak.charts.forEach((u) => u.destroy());
    soak.charts = [];
    const order = [];
    for (const c of data.cells) for (const g of c.groups) if (!order.includes(g.id)) order.push(g.id);
    const own = order.filter((id) => id.startsWith("metric:"));
    rows(data.cells, order.filter((id) => !id.startsWith("metric:")), plots);
    if (own.length) {
      const d = document.createElement("details");
      d.id = "node-figures";
      d.innerHTML = `<summary>The node's own figures (${own.length} metrics it exported that changed)</summary>`;
      plots.appendChild(d);
      d.addEventListener("toggle", () => {
        if (d.open && !d.dataset.drawn) {
          d.dataset.drawn = "1";
          rows(data.cells, own, d);
          if (soak.range) setRange(soak.range[0], soak.range[1]);
        }
      }, { once: false });
    }
    for (const c of data.cells) {
      const list = document.querySelector(`ol.events[data-cell="${CSS.escape(c.id)}"]`);
      if (list) list.innerHTML = c.marks.map((m) => `<li><a href="#" class="moment" data-cell="${esc(c.id)}" data-t="${m.t}">${seconds(m.t)}</a> <b class="${m.class}">${esc(m.kind)}</b> ${esc(m.text)}</li>`).join("");
    }
    const want = /#zoom=([\d.]+),([\d.]+)/.exec(location.hash);
    if (want) soak.zoom(+want[1], +want[2]);
    else soak.reset();
  }
  // A finding's link: the minute around its moment, or the whole cell.
  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a.moment");
    if (!a) return;
    e.preventDefault();
    const t = a.dataset.t;
    if (t != null) soak.zoom(+t - 30, +t + 30);
    else soak.reset();
    const plot = document.querySelector(`.plot[data-cell="${CSS.escape(a.dataset.cell)}"]`);
    (plot || document.getElementById("plots")).scrollIntoView({ block: "start" });
  });

  // ---- the live page ----
  // The status: the progress line, the cells done, the findings so far.
  function status(data) {
    const st = data.status || {};
    const p = document.getElementById("progress");
    if (p) {
      if (!data.live) p.textContent = (st.interrupted ? "The run was interrupted. " : "The run has ended. ") + (st.report ? "Its report: " + st.report + "/report.html" : "");
      else p.textContent = st.line || "starting…";
    }
    const v = document.getElementById("live-verdict");
    if (v) { v.textContent = data.verdict; v.className = "verdict " + data.verdict; }
    const list = document.getElementById("status");
    if (list) {
      const running = data.cells.filter((c) => c.verdict === "running").map((c) => `<li><code>${esc(c.id)}</code> <span class="running">running</span></li>`);
      list.innerHTML = (st.done || []).map((c) => `<li><code>${esc(c.id)}</code> <span class="${c.verdict}">${c.verdict}</span>: ${esc(c.text)}</li>`).concat(running).join("") +
        (st.cells ? `<li class="hint">${(st.done || []).length} of ${st.cells} cells done</li>` : "");
    }
    const f = document.getElementById("findings-live");
    if (f) {
      const items = [];
      for (const c of data.cells) for (const m of c.marks) if (m.class === "finding") items.push(`<li><a href="#" class="moment" data-cell="${esc(c.id)}" data-t="${m.t}">${seconds(m.t)}</a> <code>${esc(c.id)}</code> <b class="finding">${esc(m.kind)}</b> ${esc(m.text)}</li>`);
      f.innerHTML = items.join("") || "<li>none yet</li>";
    }
  }
  // The same charts as before: new data into them, the zoom kept (or
  // following the end of the run while the whole run is shown).
  function shape(data) {
    return data.cells.map((c) => c.id + ":" + c.groups.map((g) => g.id + "/" + g.series.length).join(",")).join(";");
  }
  function update(data) {
    const following = !soak.range || soak.range[1] >= soak.end - 1e-9;
    const start = soak.range ? soak.range[0] : 0;
    soak.data = data;
    soak.end = Math.max(1, ...data.cells.map((c) => c.end));
    for (const id of Object.keys(soak.ymax)) rowMax(data.cells, id);
    for (const u of soak.charts) {
      const cell = data.cells.find((c) => c.id === u.soakCellId);
      const group = cell && cell.groups.find((g) => g.id === u.soakGroupId);
      if (!group) continue;
      u.soakCell = cell;
      const t = table(group);
      u.setData(group.stacked ? stack(t) : t, false);
    }
    if (following) setRange(start, soak.end);
    else setRange(soak.range[0], soak.range[1]);
  }
  soak.messages = 0;
  soak.received = [];
  function live() {
    return new Promise((done) => {
      const es = new EventSource("events");
      let drawn = "";
      let cells = [];
      es.onmessage = (e) => {
        const data = JSON.parse(e.data);
        soak.messages++;
        // A cell done comes once; later messages carry the rest.
        soak.received.push(data.cells.map((c) => c.id + ":" + c.verdict));
        if (data.cells_from != null) data.cells = cells.slice(0, data.cells_from).concat(data.cells);
        cells = data.cells;
        const sig = shape(data);
        if (sig !== drawn) { render(data); drawn = sig; } else update(data);
        status(data);
        soak.rendered = true;
        document.body.dataset.rendered = document.body.dataset.rendered || "live";
        if (!data.live) { es.close(); document.body.dataset.finished = "true"; done(); }
      };
      es.onerror = () => {
        // The run and its dashboard are gone.
        es.close();
        if (!document.body.dataset.finished) {
          const p = document.getElementById("progress");
          if (p) p.textContent = "The dashboard has stopped (the run ended).";
          document.body.dataset.finished = "true";
        }
        done();
      };
    });
  }

  async function main() {
    const t0 = performance.now();
    if (document.body.dataset.live === "true") {
      await live();
      return;
    } else {
      render(await unpack(document.getElementById("soak-data").textContent));
    }
    soak.rendered = true;
    // From the navigation's start to every chart drawn.
    soak.paintedAt = performance.now();
    document.body.dataset.rendered = String(Math.round(performance.now() - t0));
  }
  main().catch((e) => { soak.errors.push(String(e)); document.body.dataset.rendered = "error"; });
})();
