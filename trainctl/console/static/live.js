// The now page's live list: each lifecycle event from /live (server-sent events) becomes an
// li[data-state][data-request-id] at the top of ol#live, its text set with textContent only (never parsed as
// markup), and the page's tables are asked to re-fetch themselves (htmx, on the "trainctl-event" event).
(function () {
  "use strict";
  var MAX_ITEMS = 100;

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
    message.textContent = String(event.message || "").slice(0, 300);
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
