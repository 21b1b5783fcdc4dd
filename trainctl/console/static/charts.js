// The charts: a request's loss curve (#curve, from script#curve-data) and the history's timeline (#charts, from
// script#history-data), drawn with uPlot from the JSON the server put in the page (never markup).
(function () {
  "use strict";
  var COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f"];
  // A state keeps its colour on every chart (the tables' colours, console.css).
  var NAMED = {
    succeeded: "#137333", failed: "#b3261e", cancelled: "#7f7f7f", rejected: "#e37400", skipped: "#9467bd",
    promoted: "#137333", held: "#a05a00", "data rejections": "#e37400",
  };

  function data(id) {
    var node = document.getElementById(id);
    if (!node) {
      return null;
    }
    try {
      return JSON.parse(node.textContent);
    } catch (_) {
      return null;
    }
  }

  function width(node) {
    return Math.max(320, Math.min(900, node.clientWidth || 640));
  }

  function plot(node, title, x, series, options) {
    var opts = {
      title: title,
      width: width(node),
      height: 240,
      scales: { x: { time: !!(options && options.time) } },
      series: [{ label: (options && options.xLabel) || "x" }],
      axes: [{}, {}],
    };
    var columns = [x];
    Object.keys(series).forEach(function (name, i) {
      opts.series.push({ label: name, stroke: NAMED[name] || COLOURS[i % COLOURS.length], width: 2, spanGaps: true });
      columns.push(series[name]);
    });
    return new uPlot(opts, columns, node);
  }

  function curve() {
    var node = document.getElementById("curve");
    var found = data("curve-data");
    if (!node || !found || !window.uPlot || !found.x.length) {
      return;
    }
    var title = "losses and metric per " + found.x_name;
    if (found.best_epoch !== null && found.best_epoch !== undefined) {
      title += " (kept: epoch " + found.best_epoch + (found.stopped_early ? ", stopped early" : "") + ")";
    }
    plot(node, title, found.x, found.series, { xLabel: found.x_name });
  }

  function history() {
    var found = data("history-data");
    if (!found || !window.uPlot || !found.x.length) {
      return;
    }
    var charts = {
      by_state: found.by_state,
      gpu_hours: { "GPU-hours": found.gpu_hours, "cost (USD)": found.cost_usd },
      time_to_start: { "median time to start (s)": found.time_to_start_seconds },
      decisions: { promoted: found.promoted, held: found.held, "data rejections": found.data_rejections },
    };
    Object.keys(charts).forEach(function (name) {
      var node = document.querySelector('#charts [data-chart="' + name + '"]');
      if (node) {
        plot(node, "", found.x, charts[name], { time: true, xLabel: "time" });
      }
    });
  }

  function start() {
    curve();
    history();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
