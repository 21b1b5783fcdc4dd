// The charts: a request's loss curve (#curve, from script#curve-data) and the history's timeline (#charts, from
// script#history-data), drawn with uPlot from the JSON the server put in the page (never markup).
(function () {
  "use strict";
  var COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f"];
  // A state keeps its colour on every chart (the tables' colours, console.css).
  var NAMED = {
    succeeded: "#137333", failed: "#b3261e", cancelled: "#7f7f7f", rejected: "#e37400", skipped: "#9467bd",
    // On the decisions chart: green, brown and purple, told apart at a glance (held and data rejections were two
    // oranges).
    promoted: "#137333", held: "#a05a00", "data rejections": "#6a3d9a",
  };
  // Every time on the charts is UTC with a 24-hour clock, as the tables write it (uPlot's default is the browser's
  // local time with am/pm): its tzDate option shifts the dates it formats, and the axis and legend formats are ours.
  function utc(seconds) {
    return uPlot.tzDate(new Date(seconds * 1e3), "Etc/UTC");
  }
  var DAY = 86400;

  function timeAxis() {
    var day = uPlot.fmtDate("{YYYY}-{MM}-{DD}");
    var minute = uPlot.fmtDate("{HH}:{mm}\n{MM}-{DD}");
    return {
      values: function (u, splits, axis, space, incr) {
        return splits.map(function (t) {
          return t === null || t === undefined ? "" : (incr >= DAY ? day : minute)(utc(t));
        });
      },
    };
  }

  function timeLegend() {
    var full = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm} UTC");
    return function (u, t) {
      return t === null || t === undefined ? "-" : full(utc(t));
    };
  }

  // A count's axis (epochs, steps): whole numbers only, never 2.5.
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

  function countAxis() {
    return {
      incrs: WHOLE,
      values: function (u, splits) {
        return splits.map(function (v) {
          return Number.isInteger(v) ? String(v) : "";
        });
      },
    };
  }

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

  // The chart's box's whole inner width (its padding left out), 320 px at least.
  function width(node) {
    var style = window.getComputedStyle(node);
    var padding = parseFloat(style.paddingLeft || "0") + parseFloat(style.paddingRight || "0");
    return Math.max(320, Math.floor((node.clientWidth || 640) - padding));
  }

  function plot(node, title, x, series, options) {
    var time = !!(options && options.time);
    var opts = {
      title: title,
      width: width(node),
      height: 240,
      scales: { x: { time: time } },
      series: [{ label: (options && options.xLabel) || "x" }],
      axes: [time ? timeAxis() : countAxis(), {}],
    };
    if (time) {
      opts.tzDate = utc;
      opts.series[0].value = timeLegend();
    }
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
