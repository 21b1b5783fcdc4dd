// The now page's live list: each lifecycle event from /live (server-sent events) becomes an
// li[data-state][data-request-id] at the top of ol#live, its text set with textContent only (never parsed as
// markup), and the page's tables are asked to re-fetch themselves (htmx, on the "trainctl-event" event).
(function () {
  "use strict";
  var MAX_ITEMS = 100;
  // As views/common.py clipped(): at most MAX_TEXT characters, cut at a word's end where one is within WORD_BACK,
  // with an ellipsis; the title (the tooltip) has the text in full, up to MAX_TITLE.
  var MAX_TEXT = 300;
  var MAX_TITLE = 2000;
  var WORD_BACK = 40;

  function clipped(text, limit) {
    if (text.length <= limit) {
      return text;
    }
    var cut = text.slice(0, limit - 1);
    var space = cut.lastIndexOf(" ");
    if (space >= limit - 1 - WORD_BACK && space > 0) {
      cut = cut.slice(0, space);
    }
    return cut.replace(/\s+$/, "") + "\u2026";
  }

  function item(event) {
    var li = document.createElement("li");
    li.dataset.state = String(event.state);
    li.dataset.requestId = String(event.request_id);
    var time = document.createElement("time");
    time.dateTime = String(event.time);
    time.textContent = String(event.time).slice(11, 19);
    var state = document.createElement("span");
    state.className = "state";
    state.textContent = String(event.state);
    var link = document.createElement("a");
    var query = event.team ? "?team=" + encodeURIComponent(String(event.team)) : "";
    link.href = "/requests/" + encodeURIComponent(String(event.request_id)) + query;
    link.textContent = String(event.request_id);
    var message = document.createElement("span");
    message.className = "message";
    var text = String(event.message || "");
    message.textContent = clipped(text, MAX_TEXT);
    if (text.length > MAX_TEXT) {
      message.title = clipped(text, MAX_TITLE);
    }
    li.append(time, " ", state, " ", link, " ", message);
    return li;
  }

  function start() {
    var list = document.getElementById("live");
    if (!list || !window.EventSource) {
      return;
    }
    var source = new EventSource("/live");
    source.addEventListener("trainctl", function (message) {
      var event;
      try {
        event = JSON.parse(message.data);
      } catch (_) {
        return;
      }
      list.insertBefore(item(event), list.firstChild);
      while (list.children.length > MAX_ITEMS) {
        list.removeChild(list.lastElementChild);
      }
      document.body.dispatchEvent(new CustomEvent("trainctl-event"));
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
