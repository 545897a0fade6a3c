// sparkmq console: live charts (uPlot) and live tail (EventSource). No inline script anywhere:
// the pages are served with Content-Security-Policy: default-src 'self'.
(function () {
  "use strict";

  function chartOptions(title, labels, width) {
    var colors = ["#2e86c1", "#d35400"];
    return {
      title: title,
      width: width,
      height: 200,
      series: [{}].concat(labels.map(function (label, i) {
        return { label: label, stroke: colors[i % colors.length], width: 2 };
      })),
      axes: [{}, { size: 70 }],
    };
  }

  var CHARTS = {
    msgs: { labels: ["in msg/s", "out msg/s"], keys: ["in_msgs", "out_msgs"] },
    bytes: { labels: ["in B/s", "out B/s"], keys: ["in_bytes", "out_bytes"] },
    latency: { labels: ["p50 ms", "p99 ms"], keys: ["p50_ms", "p99_ms"] },
    lag: { labels: ["lag"], keys: ["lag"] },
  };

  function startCharts(root) {
    var status = document.getElementById("chart-status");
    var plots = {};
    var url = root.getAttribute("data-series-url");
    var interval = parseInt(root.getAttribute("data-interval-ms"), 10) || 5000;

    function draw(series) {
      Object.keys(CHARTS).forEach(function (name) {
        var spec = CHARTS[name];
        var data = [series.time].concat(spec.keys.map(function (k) { return series[k]; }));
        var holder = root.querySelector('[data-chart="' + name + '"]');
        if (!plots[name]) {
          var width = Math.max(300, holder.clientWidth || 520);
          plots[name] = new uPlot(chartOptions("", spec.labels, width), data, holder);
        } else {
          plots[name].setData(data);
        }
      });
      root.setAttribute("data-samples", String(series.time.length));
      status.textContent = series.time.length + " sample(s); updated " + new Date().toISOString();
    }

    function poll() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)); })
        .then(function (series) { if (series.time) { draw(series); } })
        .catch(function (err) { status.textContent = "charts: " + err.message; })
        .finally(function () { window.setTimeout(poll, interval); });
    }
    poll();
  }

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function startTail(root) {
    var status = document.getElementById("tail-status");
    var rows = document.getElementById("tail-rows");
    var messageUrl = root.getAttribute("data-message-url");
    var count = 0;
    var source = new EventSource(root.getAttribute("data-events-url"));
    source.addEventListener("ready", function () { status.textContent = "live: waiting for messages"; });
    source.addEventListener("end", function () { status.textContent = "tail ended; reload to continue"; source.close(); });
    source.addEventListener("message", function (event) {
      var m = JSON.parse(event.data);
      var tr = document.createElement("tr");
      cell(tr, String(m.queue_id));
      var link = document.createElement("a");
      link.href = messageUrl + encodeURIComponent(m.msg_id);
      link.textContent = String(m.queue_offset);
      cell(tr, "").appendChild(link);
      cell(tr, new Date(m.store_timestamp).toISOString());
      cell(tr, m.tags || "");
      cell(tr, (m.keys || []).join(" "));
      cell(tr, m.body);
      rows.insertBefore(tr, rows.firstChild);
      while (rows.children.length > 500) { rows.removeChild(rows.lastChild); }
      count += 1;
      status.textContent = "live: " + count + " message(s)";
    });
    source.onerror = function () { status.textContent = "disconnected; retrying…"; };
  }

  document.addEventListener("DOMContentLoaded", function () {
    var charts = document.getElementById("charts");
    if (charts) { startCharts(charts); }
    var tail = document.getElementById("tail");
    if (tail) { startTail(tail); }
  });
})();
