// Telemetry charts (uPlot) for the chart partial (templates/telemetry/includes/chart.html): GPU, server, rack
// and row scopes, range buttons 1 h .. 1 y. Each series is one history API call with resolution=auto, so the
// server picks the tier (raw, 5-minute, 1-hour) that covers the range. Works after htmx swaps too.
(function () {
  "use strict";
  if (window.FleetCharts) return;

  var RANGES = { "1h": 3600, "24h": 86400, "7d": 7 * 86400, "90d": 90 * 86400, "1y": 365 * 86400 };
  var GROUP_SCOPES = { rack: 1, row: 1, site: 1 };
  var COLORS = ["#1f6feb", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#0b625a", "#bc4c00", "#6e7781"];

  // --- history API --------------------------------------------------------------------------------------
  function toSeconds(t) {
    if (typeof t === "number") return t > 1e12 ? t / 1000 : t;
    return Date.parse(t) / 1000;
  }

  // -> {x: [...seconds], min: [], avg: [], max: []}. Rows are [ts, min, avg, max] or {bucket|ts, min, avg, max}.
  function parseHistory(json) {
    var rows = Array.isArray(json) ? json : json.points || json.results || json.data || json.rows || [];
    var out = { x: [], min: [], avg: [], max: [], resolution: json.resolution || null };
    rows.forEach(function (r) {
      if (Array.isArray(r)) {
        out.x.push(toSeconds(r[0])); out.min.push(r[1]); out.avg.push(r[2]); out.max.push(r[3]);
      } else {
        out.x.push(toSeconds(r.bucket || r.ts || r.t || r.time));
        out.min.push(r.min); out.avg.push(r.avg); out.max.push(r.max);
      }
    });
    return out;
  }

  function fetchHistory(base, scope, id, metric, range) {
    var end = Math.floor(Date.now() / 1000), start = end - RANGES[range];
    var url = base + "?scope=" + scope + "&id=" + id + "&metric=" + metric +
      "&start=" + new Date(start * 1000).toISOString() + "&end=" + new Date(end * 1000).toISOString() + "&resolution=auto";
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (r) {
      if (!r.ok) return r.json().catch(function () { return {}; }).then(function (body) {
        throw new Error(body.detail || (metric + ": HTTP " + r.status));  // e.g. the history store is down
      });
      return r.json();
    }).then(function (json) {
      var h = parseHistory(json);
      h.start = start; h.end = end;
      return h;
    });
  }

  // --- plots --------------------------------------------------------------------------------------------
  function baseOpts(el, series, extra) {
    var opts = {
      width: Math.max(el.clientWidth, 240), height: 150,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      scales: { x: { time: true } },
      axes: [{ stroke: "#5d6b7a", grid: { stroke: "#eaeef2" } }, { stroke: "#5d6b7a", grid: { stroke: "#eaeef2" }, size: 46 }],
      series: [{}].concat(series),
    };
    for (var k in extra) opts[k] = extra[k];
    return opts;
  }

  function plot(el, opts, data) {
    el.innerHTML = "";
    if (!data[0].length) { el.innerHTML = '<div class="chart-empty muted small">No data in this range.</div>'; return null; }
    var u = new window.uPlot(opts, data, el);
    el._uplot = u;
    return u;
  }

  function bars() { return window.uPlot.paths && window.uPlot.paths.bars ? window.uPlot.paths.bars({ size: [0.8, 40] }) : undefined; }

  // XID markers: a vertical line per event (red: hardware, grey: application), its number on top.
  function xidPlugin(xids) {
    return {
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx, top = u.bbox.top, bottom = top + u.bbox.height;
          ctx.save();
          ctx.font = (10 * devicePixelRatio) + "px system-ui, sans-serif";
          ctx.textAlign = "center";
          xids.forEach(function (x) {
            if (x.t < u.scales.x.min || x.t > u.scales.x.max) return;
            var px = Math.round(u.valToPos(x.t, "x", true));
            ctx.strokeStyle = x.hw ? "rgba(207,34,46,.8)" : "rgba(110,119,129,.6)";
            ctx.lineWidth = devicePixelRatio;
            ctx.beginPath(); ctx.moveTo(px, top + 12 * devicePixelRatio); ctx.lineTo(px, bottom); ctx.stroke();
            ctx.fillStyle = ctx.strokeStyle;
            ctx.fillText(String(x.xid), px, top + 10 * devicePixelRatio);
          });
          ctx.restore();
        }],
      },
    };
  }

  function bandPanel(el, h, label, unit) {
    var opts = baseOpts(el, [
      { label: "max", stroke: "rgba(207,34,46,.55)", width: 1, value: fmt(unit) },
      { label: "avg", stroke: "#1f6feb", width: 1.5, value: fmt(unit) },
      { label: "min", stroke: "rgba(31,111,235,.45)", width: 1, value: fmt(unit) },
    ], { bands: [{ series: [1, 3], fill: "rgba(31,111,235,.10)" }] });
    opts.scales.x.range = [h.start, h.end];
    return plot(el, opts, [h.x, h.max, h.avg, h.min]);
  }

  function fmt(unit) { return function (u, v) { return v == null ? "—" : (Math.round(v * 10) / 10) + " " + unit; }; }

  function drawPanels(section) {
    var d = section.dataset, scope = d.scope, id = d.scopeId, range = d.range, base = d.historyUrl;
    var status = section.querySelector(".chart-status");
    var panels = d.panels.split(",");
    var box = function (name) { var b = section.querySelector('.chart-box[data-panel="' + name + '"] .chart-plot'); return b; };
    var jobs = [];
    status.textContent = "Loading " + range + "…";

    if (scope === "server") {
      var gpus = JSON.parse(section.querySelector(".chart-series script").textContent);
      [["temp", "gpu_temp", "°C"], ["power", "power", "W"]].forEach(function (p) {
        if (panels.indexOf(p[0]) < 0) return;
        jobs.push(Promise.all(gpus.map(function (g) { return fetchHistory(base, "gpu", g.id, p[1], range); })).then(function (hs) {
          var tables = hs.map(function (h) { return [h.x, h.avg]; });
          var data = tables.length && window.uPlot.join ? window.uPlot.join(tables) : [[]];
          var opts = baseOpts(box(p[0]), gpus.map(function (g, i) {
            return { label: g.label, stroke: COLORS[i % COLORS.length], width: 1.25, value: fmt(p[2]), spanGaps: true };
          }));
          if (hs.length) opts.scales.x.range = [hs[0].start, hs[0].end];
          plot(box(p[0]), opts, data);
          return hs[0] && hs[0].resolution;
        }));
      });
    } else if (GROUP_SCOPES[scope]) {
      jobs.push(fetchHistory(base, scope, id, "gpu_temp", range).then(function (h) {
        var opts = baseOpts(box("temp"), [
          { label: "max", stroke: "#cf222e", width: 1.25, value: fmt("°C") },
          { label: "avg", stroke: "#1f6feb", width: 1.5, value: fmt("°C") },
        ]);
        opts.scales.x.range = [h.start, h.end];
        plot(box("temp"), opts, [h.x, h.max, h.avg]);
        return h.resolution;
      }));
      // The group's draw (sum of its GPUs' power) when the history API offers it, else the mean and max per GPU.
      jobs.push(fetchHistory(base, scope, id, "power_sum", range).then(function (h) {
        var opts = baseOpts(box("power"), [{ label: "sum", stroke: "#9a6700", width: 1.5, fill: "rgba(154,103,0,.08)", value: fmt("W") }]);
        opts.scales.x.range = [h.start, h.end];
        plot(box("power"), opts, [h.x, h.avg]);
      }, function () {
        return fetchHistory(base, scope, id, "power", range).then(function (h) {
          var title = section.querySelector('.chart-box[data-panel="power"] h3');
          if (title) title.textContent = "Power per GPU (W): mean and max";
          var opts = baseOpts(box("power"), [
            { label: "max", stroke: "#cf222e", width: 1.25, value: fmt("W") },
            { label: "avg", stroke: "#9a6700", width: 1.5, value: fmt("W") },
          ]);
          opts.scales.x.range = [h.start, h.end];
          plot(box("power"), opts, [h.x, h.max, h.avg]);
        });
      }));
    } else {
      jobs.push(fetchHistory(base, scope, id, "gpu_temp", range).then(function (h) { bandPanel(box("temp"), h, "Temperature", "°C"); return h.resolution; }));
      jobs.push(fetchHistory(base, scope, id, "power", range).then(function (h) { bandPanel(box("power"), h, "Power", "W"); }));
      if (panels.indexOf("throttle") >= 0) {
        // Share of samples with a hardware throttle reason (power cap, HW slowdown, thermal, power brake), in %.
        jobs.push(fetchHistory(base, scope, id, "throttle", range).then(function (h) {
          var pct = h.avg.map(function (v) { return v == null ? null : Math.round(v * 1000) / 10; });
          var opts = baseOpts(box("throttle"), [{ label: "throttled", stroke: "#bc4c00", fill: "rgba(188,76,0,.35)", paths: bars(), value: fmt("%") }]);
          opts.scales.x.range = [h.start, h.end];
          opts.scales.y = { range: [0, 100] };
          plot(box("throttle"), opts, [h.x, pct]);
        }));
      }
      if (panels.indexOf("errors") >= 0) {
        var xidEl = section.querySelector(".chart-xids script");
        var xids = xidEl ? JSON.parse(xidEl.textContent) : [];
        // Hardware XIDs per bucket, and the ECC DBE / uncorrectable-remap deltas where the history API has them;
        // every XID (hardware red, application grey) as a marker with its number.
        var ERROR_SERIES = [["xid", "HW XIDs", "#6e7781", "rgba(110,119,129,.35)"],
                            ["ecc_dbe", "ECC DBE", "#cf222e", "rgba(207,34,46,.35)"],
                            ["remap_unc", "unc. remaps", "#8250df", "rgba(130,80,223,.35)"]];
        jobs.push(Promise.all(ERROR_SERIES.map(function (s) {
          return fetchHistory(base, scope, id, s[0], range).catch(function () { return null; });
        })).then(function (hs) {
          var el = box("errors"), got = [], series = [];
          hs.forEach(function (h, i) {
            if (!h) return;
            got.push([h.x, h.avg.map(function (v, k) { return v != null ? v : h.max[k]; })]);
            series.push({ label: ERROR_SERIES[i][1], stroke: ERROR_SERIES[i][2], fill: ERROR_SERIES[i][3], paths: bars(), value: fmt("") });
          });
          var end = Math.floor(Date.now() / 1000), start = end - RANGES[range];
          var data = got.length && window.uPlot.join ? window.uPlot.join(got) : [[]];
          if (!data[0].length) { // markers only
            data = [[start, end]].concat(series.map(function () { return [null, null]; }));
          }
          var opts = baseOpts(el, series, { plugins: [xidPlugin(xids)] });
          opts.scales.x.range = [start, end];
          plot(el, opts, data);
        }));
      }
    }
    Promise.allSettled(jobs).then(function (results) {
      var failed = results.filter(function (r) { return r.status === "rejected"; });
      var resolution = results.map(function (r) { return r.value; }).filter(Boolean)[0];
      status.textContent = failed.length ? "Some series could not load: " + failed[0].reason.message :
        (resolution ? "Resolution: " + resolution : "");
      section.dataset.drawn = String((+section.dataset.drawn || 0) + 1);
    });
  }

  function init(root) {
    (root || document).querySelectorAll("[data-chart]").forEach(function (section) {
      if (section._chartInit) return;
      section._chartInit = true;
      section.querySelectorAll(".range-btn").forEach(function (btn) {
        btn.addEventListener("click", function () {
          section.querySelectorAll(".range-btn").forEach(function (b) { b.classList.toggle("active", b === btn); });
          section.dataset.range = btn.dataset.range;
          drawPanels(section);
        });
      });
      drawPanels(section);
    });
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      document.querySelectorAll(".chart-plot").forEach(function (el) {
        if (el._uplot) el._uplot.setSize({ width: Math.max(el.clientWidth, 240), height: 150 });
      });
    }, 150);
  });

  window.FleetCharts = { init: init, parseHistory: parseHistory };
  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:afterSettle", function (event) { init(event.target.parentElement || document); });
})();
