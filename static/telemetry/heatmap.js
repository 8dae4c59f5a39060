// Fleet heatmap: every GPU one cell on a canvas, grouped site -> row -> rack -> server.
// Layout: a site is a section; a row is a line of racks (wrapping when long); a rack is a block whose lines
// are its servers; a server's GPUs are adjacent cells. Cells are written into one ImageData (typed arrays,
// one putImageData per frame); labels live on a second canvas drawn once per layout.
(function () {
  "use strict";

  var config = document.getElementById("heatmap-config");
  if (!config) return;
  var canvas = document.getElementById("hm-canvas");
  var labels = document.getElementById("hm-labels");
  var wrap = document.getElementById("hm-wrap");
  var tooltip = document.getElementById("hm-tooltip");
  var statusEl = document.getElementById("hm-status");
  var legendEl = document.getElementById("hm-legend");
  var slider = document.getElementById("hm-slider");
  var playBtn = document.getElementById("hm-play");
  var liveBtn = document.getElementById("hm-live");
  var timeEl = document.getElementById("hm-time");

  var stats = (window.__heatmapStats = { cells: 0, drawn: 0 });
  // For tests and debugging: the centre of a GPU's cell in canvas pixels.
  stats.cellOf = function (gpuId) {
    var i = fleet && fleet.index.get(gpuId);
    return i == null ? null : { x: layout.x[i] + layout.cell / 2, y: layout.y[i] + layout.cell / 2 };
  };
  var metric = config.dataset.metric;
  var categories = null; // a categorical layer's values ({label, color (packed), css, always}), null for a metric
  var fleet = null; // normalised data (see normalize)
  var layout = null;
  var values = null; // Float32Array, NaN = no data
  var frames = null;
  var playing = null;

  // --- data ---------------------------------------------------------------------------------------------
  // The heatmap API (telemetry.selectors.heatmap_data) returns parallel arrays in fleet order:
  // "gpus" (ids), "values" (None: unknown), and "groups" {site,row,rack,server: {id, name, start}}: each group
  // is contiguous and starts at index start[i] of "gpus".

  function groupArrays(g, n) {
    var m = g.id.length, out = { id: Int32Array.from(g.id), name: g.name, start: Int32Array.from(g.start), end: new Int32Array(m) };
    for (var i = 0; i < m; i++) out.end[i] = i + 1 < m ? g.start[i + 1] : n;
    return out;
  }

  function normalize(data) {
    var n = data.gpus.length;
    var f = { n: n, gpuIds: Int32Array.from(data.gpus), at: data.at, unit: data.unit || "" };
    var empty = { id: [], name: [], start: [] };
    f.sites = groupArrays(data.groups.site || empty, n);
    f.rows = groupArrays(data.groups.row || empty, n);
    f.racks = groupArrays(data.groups.rack || empty, n);
    f.servers = groupArrays(data.groups.server || empty, n);
    f.index = new Map();
    for (var i = 0; i < n; i++) f.index.set(f.gpuIds[i], i);
    // Each rack's index, per GPU (rack-level playback frames).
    f.rackOf = new Int32Array(n);
    for (var r = 0; r < f.racks.id.length; r++) f.rackOf.fill(r, f.racks.start[r], f.racks.end[r]);
    return f;
  }

  function readValues(raw, n) {
    var out = new Float32Array(n);
    for (var i = 0; i < n; i++) {
      var v = raw[i];
      out[i] = v == null ? (metric === "health" ? 0 : NaN) : v; // health: no open flag = healthy
    }
    return out;
  }

  // --- colour ---------------------------------------------------------------------------------------------
  // 256-entry palettes as packed RGBA (little-endian Uint32: 0xAABBGGRR).
  function pack(r, g, b) { return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0; }
  var STOPS = [[0, [49, 54, 149]], [0.25, [69, 117, 180]], [0.45, [171, 217, 233]], [0.6, [254, 224, 144]],
               [0.8, [244, 109, 67]], [1, [165, 0, 38]]];
  var RAMP = new Uint32Array(256);
  var RAMP_CSS = [];
  (function () {
    for (var i = 0; i < 256; i++) {
      var t = i / 255, k = 1;
      while (k < STOPS.length - 1 && STOPS[k][0] < t) k++;
      var a = STOPS[k - 1], b = STOPS[k], u = (t - a[0]) / (b[0] - a[0] || 1);
      var c = [0, 1, 2].map(function (j) { return Math.round(a[1][j] + (b[1][j] - a[1][j]) * u); });
      RAMP[i] = pack(c[0], c[1], c[2]);
      if (i % 32 === 0 || i === 255) RAMP_CSS.push("rgb(" + c.join(",") + ") " + Math.round(t * 100) + "%");
    }
  })();
  var NODATA = pack(214, 219, 225), BG = pack(255, 255, 255);
  var SCALES = { gpu_temp: [30, 90, "°C"], power: [0, 800, "W"] };
  var scale = [0, 1, ""];

  // A categorical layer (health flags, scheduler state) names its values and their colours in the document.
  function readCategories(list) {
    if (!list || !list.length) return null;
    return list.map(function (c) {
      var hex = parseInt(String(c.color).replace("#", ""), 16);
      return { label: c.label, css: c.color, always: c.always, packed: pack((hex >> 16) & 255, (hex >> 8) & 255, hex & 255) };
    });
  }

  function autoScale() {
    if (categories) { scale = [0, categories.length - 1, ""]; return; }
    var fixed = SCALES[metric] || [0, 1, ""];
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v === v) { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    if (lo === Infinity) { scale = fixed; return; }
    // The fixed range, widened when the data leaves it: a colour means the same at every frame.
    scale = [Math.min(fixed[0], Math.floor(lo)), Math.max(fixed[1], Math.ceil(hi)), fixed[2]];
  }

  function colour(v) {
    if (v !== v) return NODATA;
    if (categories) return (categories[v | 0] || {}).packed || NODATA;
    var t = (v - scale[0]) / (scale[1] - scale[0] || 1);
    return RAMP[t <= 0 ? 0 : t >= 1 ? 255 : (t * 255) | 0];
  }

  function drawLegend() {
    if (categories) {
      var counts = new Array(categories.length).fill(0);
      for (var i = 0; i < values.length; i++) if (values[i] === values[i]) counts[values[i] | 0]++;
      legendEl.innerHTML = categories.map(function (c, k) {
        if (!c.always && !counts[k]) return "";
        return '<span class="legend-item" data-category="' + k + '"><span class="swatch" style="background:' +
          escapeHtml(c.css) + '"></span>' + escapeHtml(c.label) + ' <span class="muted">' + counts[k].toLocaleString() + "</span></span>";
      }).join(" ") + ' <span class="swatch nodata"></span>no data';
      return;
    }
    legendEl.innerHTML = '<span class="lo">' + scale[0] + " " + scale[2] + '</span><span class="ramp" style="background:linear-gradient(90deg,' +
      RAMP_CSS.join(",") + ')"></span><span class="hi">' + scale[1] + " " + scale[2] + '</span> <span class="swatch nodata"></span>no data';
  }

  // --- layout ---------------------------------------------------------------------------------------------
  // A site is a section; its rows flow left to right as blocks (label on top, racks side by side, wrapping
  // inside a row only when the row is wider than the canvas); a rack is a block of server lines.
  var SITE_HEAD = 22, ROW_HEAD = 13, RACK_GAP = 3, ROW_SPACING = 14, LINE_GAP = 6;

  function computeLayout(width) {
    var f = fleet, racks = f.racks, servers = f.servers;
    // Rack shape in cells: widest server x number of servers.
    var rackCols = new Int32Array(racks.id.length), rackLines = new Int32Array(racks.id.length);
    var s = 0;
    for (var r = 0; r < racks.id.length; r++) {
      var lines = 0, cols = 1;
      while (s < servers.id.length && servers.start[s] < racks.end[r]) {
        if (servers.end[s] > racks.start[r]) { lines++; cols = Math.max(cols, servers.end[s] - servers.start[s]); }
        s++;
      }
      rackCols[r] = cols; rackLines[r] = Math.max(lines, 1);
    }
    // Cell size: the largest that keeps the whole fleet within about 1.6 screens.
    var target = Math.max(window.innerHeight * 1.6, 600);
    var result = { rackCols: rackCols, rackLines: rackLines };
    var cell = 14;
    for (; cell > 2; cell--) if (place(cell, null) <= target) break;
    result.cell = cell;
    result.height = place(cell, result);
    return result;

    function place(c, out) {
      var rackHead = c >= 6 ? 10 : 4;
      var sites = f.sites, rows = f.rows, y = 0, ri = 0, rk = 0;
      if (out) {
        out.rackHead = rackHead;
        out.rackX = new Float32Array(racks.id.length); out.rackY = new Float32Array(racks.id.length);
        out.siteY = new Float32Array(sites.id.length);
        out.rowX = new Float32Array(rows.id.length); out.rowY = new Float32Array(rows.id.length);
      }
      for (var si = 0; si < sites.id.length; si++) {
        if (out) out.siteY[si] = y;
        y += SITE_HEAD;
        var lineX = 0, lineH = 0;
        while (ri < rows.id.length && rows.start[ri] < sites.end[si]) {
          // The row's racks, first measured as one line (wrapping at the canvas width).
          var first = rk, bx = 0, by = 0, bw = 0, bh = 0, rowLineH = 0;
          var last = first;
          while (last < racks.id.length && racks.start[last] < rows.end[ri]) last++;
          var total = 0;
          for (var k = first; k < last; k++) total += rackCols[k] * c + RACK_GAP;
          var blockW = Math.min(total - RACK_GAP, width);
          if (lineX > 0 && lineX + blockW > width) { y += lineH + LINE_GAP; lineX = 0; lineH = 0; }
          for (k = first; k < last; k++) {
            var rw = rackCols[k] * c, rh = rackHead + rackLines[k] * c;
            if (bx > 0 && bx + rw > width) { by += rowLineH + RACK_GAP; bx = 0; rowLineH = 0; }
            if (out) { out.rackX[k] = lineX + bx; out.rackY[k] = y + ROW_HEAD + by; }
            bx += rw + RACK_GAP; bw = Math.max(bw, bx - RACK_GAP); rowLineH = Math.max(rowLineH, rh);
          }
          bh = ROW_HEAD + by + rowLineH;
          if (out) { out.rowX[ri] = lineX; out.rowY[ri] = y; }
          lineX += bw + ROW_SPACING; lineH = Math.max(lineH, bh);
          rk = last;
          ri++;
        }
        y += lineH + LINE_GAP + 6;
      }
      return y;
    }
  }

  // Per-GPU pixel position, from the layout: x, y of each cell's top-left corner.
  function cellPositions() {
    var f = fleet, L = layout, c = L.cell;
    L.x = new Float32Array(f.n); L.y = new Float32Array(f.n);
    var s = 0;
    for (var r = 0; r < f.racks.id.length; r++) {
      var line = 0;
      while (s < f.servers.id.length && f.servers.start[s] < f.racks.end[r]) {
        for (var i = Math.max(f.servers.start[s], f.racks.start[r]); i < f.servers.end[s]; i++) {
          L.x[i] = L.rackX[r] + (i - f.servers.start[s]) * c;
          L.y[i] = L.rackY[r] + L.rackHead + line * c;
        }
        line++; s++;
      }
    }
  }

  function resize() {
    var width = wrap.clientWidth - 8;
    layout = computeLayout(width);
    cellPositions();
    [canvas, labels].forEach(function (cv) { cv.width = width; cv.height = Math.ceil(layout.height); });
    wrap.style.height = Math.ceil(layout.height) + "px";
    drawLabels();
    draw();
  }

  function drawLabels() {
    var ctx = labels.getContext("2d"), f = fleet, L = layout;
    ctx.clearRect(0, 0, labels.width, labels.height);
    ctx.textBaseline = "top";
    ctx.fillStyle = "#1b2430";
    ctx.font = "600 13px system-ui, sans-serif";
    for (var si = 0; si < f.sites.id.length; si++) ctx.fillText("Site " + f.sites.name[si], 2, L.siteY[si] + 4);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#5d6b7a";
    for (var ri = 0; ri < f.rows.id.length; ri++) ctx.fillText("row " + f.rows.name[ri], L.rowX[ri], L.rowY[ri] + 1);
    ctx.font = "9px system-ui, sans-serif";
    for (var r = 0; r < f.racks.id.length; r++) {
      var w = L.rackCols[r] * L.cell;
      ctx.fillStyle = "#c9d3dd";
      ctx.fillRect(L.rackX[r], L.rackY[r] + 1, w, L.rackHead - 2); // the rack's label strip: click target
      if (w >= 34 && L.rackHead >= 10) {
        ctx.fillStyle = "#2c3b4f";
        ctx.save(); ctx.beginPath(); ctx.rect(L.rackX[r], L.rackY[r], w, L.rackHead); ctx.clip();
        ctx.fillText(String(f.racks.name[r]), L.rackX[r] + 1, L.rackY[r] + 1);
        ctx.restore();
      }
    }
  }

  // --- drawing: one ImageData, one putImageData ------------------------------------------------------
  var image = null;
  function draw() {
    var t0 = performance.now();
    var L = layout, c = L.cell, w = canvas.width, h = canvas.height;
    var ctx = canvas.getContext("2d");
    if (!image || image.width !== w || image.height !== h) image = ctx.createImageData(w, h);
    var px = new Uint32Array(image.data.buffer);
    px.fill(BG);
    var size = c > 3 ? c - 1 : c; // a 1-pixel gap between cells when they are big enough
    for (var i = 0; i < fleet.n; i++) {
      var col = colour(values[i]);
      var x = L.x[i] | 0, y = L.y[i] | 0;
      for (var dy = 0; dy < size; dy++) {
        var row = (y + dy) * w + x;
        for (var dx = 0; dx < size; dx++) px[row + dx] = col;
      }
    }
    ctx.putImageData(image, 0, 0);
    stats.drawMs = Math.round((performance.now() - t0) * 10) / 10;
    stats.drawn++;
    stats.cell = c;
  }

  // --- hit testing: rack by scan (a few thousand), then server line and slot by arithmetic ----------------
  function hit(px, py) {
    var f = fleet, L = layout, c = L.cell;
    for (var r = 0; r < f.racks.id.length; r++) {
      var x0 = L.rackX[r], y0 = L.rackY[r];
      if (px < x0 || px >= x0 + L.rackCols[r] * c || py < y0 || py >= y0 + L.rackHead + L.rackLines[r] * c) continue;
      if (py < y0 + L.rackHead) return { rack: r };
      var line = ((py - y0 - L.rackHead) / c) | 0, col = ((px - x0) / c) | 0;
      var s = serverOfRack(r, line);
      if (s < 0) return { rack: r, none: true };
      var i = f.servers.start[s] + col;
      if (i >= f.servers.end[s]) return { rack: r, none: true };
      return { rack: r, server: s, gpu: i };
    }
    return null;
  }

  function serverOfRack(r, line) {
    var f = fleet, lo = 0, hi = f.servers.id.length - 1, start = f.racks.start[r];
    while (lo < hi) { var mid = (lo + hi) >> 1; if (f.servers.end[mid] <= start) lo = mid + 1; else hi = mid; }
    var s = lo + line;
    return s < f.servers.id.length && f.servers.start[s] < f.racks.end[r] ? s : -1;
  }

  function formatValue(v) {
    if (v !== v) return "no data";
    if (categories) return (categories[v | 0] || {}).label || "no data";
    return (Math.round(v * 10) / 10) + " " + scale[2];
  }

  canvas.parentElement.addEventListener("mousemove", function (event) {
    if (!layout) return;
    var rect = canvas.getBoundingClientRect();
    var h = hit(event.clientX - rect.left, event.clientY - rect.top);
    if (!h || h.none) { tooltip.hidden = true; canvas.style.cursor = ""; return; }
    var f = fleet, html;
    if (h.gpu == null) {
      html = "<strong>Rack " + escapeHtml(f.racks.name[h.rack]) + "</strong><br>click for the rack chart";
    } else {
      var slot = h.gpu - f.servers.start[h.server] + 1, slots = f.servers.end[h.server] - f.servers.start[h.server];
      html = "<strong>GPU #" + f.gpuIds[h.gpu] + "</strong><br>" + escapeHtml(f.servers.name[h.server]) + " · slot " +
        slot + " of " + slots + "<br>rack " + escapeHtml(f.racks.name[h.rack]) + "<br><strong>" + formatValue(values[h.gpu]) + "</strong>";
    }
    tooltip.innerHTML = html;
    tooltip.hidden = false;
    var x = event.clientX - rect.left + 14, y = event.clientY - rect.top + 14;
    if (x + 200 > canvas.width) x -= 220;
    tooltip.style.left = x + "px"; tooltip.style.top = y + "px";
    canvas.style.cursor = "pointer";
  });
  canvas.parentElement.addEventListener("mouseleave", function () { tooltip.hidden = true; });
  canvas.parentElement.addEventListener("click", function (event) {
    if (!layout) return;
    var rect = canvas.getBoundingClientRect();
    var h = hit(event.clientX - rect.left, event.clientY - rect.top);
    if (!h || h.none) return;
    var url = h.gpu == null ? config.dataset.rackPanelUrl + fleet.racks.id[h.rack] + "/" :
      config.dataset.gpuPanelUrl + fleet.gpuIds[h.gpu] + "/";
    openPanel(url);
  });

  function openPanel(url) {
    var target = document.getElementById("side-panel");
    if (window.htmx) {
      window.htmx.ajax("GET", url, { target: target, swap: "outerHTML" });
    } else {
      window.location.href = url;
    }
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-side-close]")) {
      var panel = document.getElementById("side-panel");
      panel.outerHTML = '<div id="side-panel" class="side-panel empty"><p class="muted">Click a GPU cell for its charts, or a rack label for the rack\'s.</p></div>';
    }
  });

  function escapeHtml(text) {
    return String(text).replace(/[&<>"]/g, function (ch) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[ch]; });
  }

  // --- loading ------------------------------------------------------------------------------------------
  function getJson(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (r) {
      if (!r.ok) return r.json().catch(function () { return {}; }).then(function (body) {
        throw new Error(body.detail || (url + ": HTTP " + r.status));  // e.g. the history store is down
      });
      return r.json();
    });
  }

  function load() {
    var t0 = performance.now();
    statusEl.textContent = "Loading…";
    getJson(config.dataset.dataUrl + "?metric=" + encodeURIComponent(metric)).then(function (data) {
      stats.fetchMs = Math.round(performance.now() - t0);
      var t1 = performance.now();
      fleet = normalize(data);
      categories = readCategories(data.categories);
      stats.cells = fleet.n;
      values = readValues(data.values, fleet.n);
      autoScale();
      drawLegend();
      resize();
      stats.renderMs = Math.round(performance.now() - t1);
      stats.totalMs = Math.round(performance.now() - t0);
      statusEl.textContent = fleet.n.toLocaleString() + " GPUs · " + fleet.sites.id.length + " site(s) · " +
        fleet.racks.id.length.toLocaleString() + " racks · fetched in " + stats.fetchMs + " ms, drawn in " + stats.renderMs + " ms";
      canvas.dataset.ready = "1";
    }).catch(function (err) {
      statusEl.textContent = "Could not load the heatmap: " + err.message;
    });
  }

  // --- playback: the last 24 hours at 5-minute steps -------------------------------------------------------
  // Frames come per GPU, or per rack for large fleets (level "rack": every GPU of a rack takes its value).
  function loadFrames() {
    var m = metric;
    statusEl.textContent = "Loading 24 hours of frames…";
    return getJson(config.dataset.framesUrl + "?metric=" + encodeURIComponent(m) + "&hours=24").then(function (data) {
      var n = fleet.n, list = [], ids = data.ids, byRack = data.level === "rack";
      var pos = new Int32Array(ids.length);
      var lookup = byRack ? new Map(Array.prototype.map.call(fleet.racks.id, function (id, r) { return [id, r]; })) : fleet.index;
      for (var k = 0; k < ids.length; k++) { var ix = lookup.get(ids[k]); pos[k] = ix == null ? -1 : ix; }
      for (var f = 0; f < data.times.length; f++) {
        var src = data.values[f], arr = new Float32Array(n).fill(NaN);
        if (byRack) {
          var rackVal = new Float32Array(fleet.racks.id.length).fill(NaN);
          for (var j = 0; j < pos.length; j++) if (pos[j] >= 0 && src[j] != null) rackVal[pos[j]] = src[j];
          for (var i = 0; i < n; i++) arr[i] = rackVal[fleet.rackOf[i]];
        } else {
          for (var q = 0; q < pos.length; q++) if (pos[q] >= 0 && src[q] != null) arr[pos[q]] = src[q];
        }
        list.push(arr);
      }
      frames = { times: data.times, values: list, level: data.level };
      slider.max = Math.max(list.length - 1, 0);
      slider.disabled = !list.length;
      statusEl.textContent = list.length + " frames of 5 minutes" + (byRack ? " (per rack: the fleet is large)" : "");
      return frames;
    });
  }

  function showFrame(i) {
    if (!frames || !frames.values[i]) return;
    values = frames.values[i];
    slider.value = i;
    var t = frames.times[i];
    timeEl.textContent = (typeof t === "number" ? new Date(t * (t < 1e12 ? 1000 : 1)).toISOString() : String(t)).slice(0, 16).replace("T", " ");
    draw();
    liveBtn.disabled = false;
  }

  function playable() {
    var ok = !document.querySelector(".metric-btn.active[data-layer]"); // layers are "now" only
    playBtn.disabled = !ok;
    playBtn.title = ok ? "Play the last 24 hours at 5-minute steps" : "Playback shows temperature or power";
  }

  function stop() { if (playing) { clearInterval(playing); playing = null; } playBtn.textContent = "▶ Play 24 h"; }

  playBtn.addEventListener("click", function () {
    if (playing) { stop(); return; }
    (frames ? Promise.resolve(frames) : loadFrames()).then(function () {
      if (!frames.values.length) { statusEl.textContent = "No history to play back yet."; return; }
      var i = +slider.value >= frames.values.length - 1 ? 0 : +slider.value;
      playBtn.textContent = "❚❚ Pause";
      playing = setInterval(function () {
        showFrame(i);
        i++;
        if (i >= frames.values.length) stop();
      }, 120);
    }).catch(function (err) { statusEl.textContent = "Could not load frames: " + err.message; });
  });
  slider.addEventListener("input", function () { stop(); showFrame(+slider.value); });
  liveBtn.addEventListener("click", function () { stop(); timeEl.textContent = "live"; liveBtn.disabled = true; load(); });

  // Metric buttons: swap without reloading the page (they stay real links).
  document.querySelectorAll(".metric-btn").forEach(function (a) {
    a.addEventListener("click", function (event) {
      event.preventDefault();
      metric = a.dataset.metric;
      document.querySelectorAll(".metric-btn").forEach(function (b) { b.classList.toggle("active", b === a); });
      history.replaceState(null, "", a.href);
      stop(); frames = null; slider.disabled = true; slider.value = 0; timeEl.textContent = "live";
      playable();
      load();
    });
  });

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (fleet) resize(); }, 150);
  });

  playable();
  load();
})();
