/* memabra admin: confirmation of writes and the policies page's charts (Chart.js, served locally).
   Chart data comes from a JSON block the server renders; nothing here builds HTML from data. */
(function () {
  "use strict";

  // A write asks first where its form says so (data-confirm), and is sent once: a double click or
  // a second Enter while the first send is on its way would post it again (an edit would come back
  // as a conflict with itself). The buttons are disabled once the send has started (disabled at
  // once, a named button would drop out of the form).
  document.querySelectorAll("form[method=post]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (form.dataset.submitted) {
        event.preventDefault();
        return;
      }
      var question = form.getAttribute("data-confirm");
      if (question && !window.confirm(question)) {
        event.preventDefault();
        return;
      }
      // answered: a write that cannot be undone goes ahead (sent without this, the server asks
      // on a page of its own, for a browser that runs no script)
      if (form.elements.namedItem("confirmed")) {
        form.elements.namedItem("confirmed").value = "yes";
      }
      form.dataset.submitted = "1";
      window.setTimeout(function () {
        form.querySelectorAll("button[type=submit], input[type=submit]").forEach(function (button) {
          button.disabled = true;
        });
        form.setAttribute("aria-busy", "true");
      }, 0);
    });
  });

  // Back from the next page (the browser's page cache keeps this one as it was left): sendable again.
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted) {
      return;
    }
    document.querySelectorAll("form[data-submitted]").forEach(function (form) {
      delete form.dataset.submitted;
      form.removeAttribute("aria-busy");
      form.querySelectorAll("button[type=submit], input[type=submit]").forEach(function (button) {
        button.disabled = false;
      });
    });
  });

  // A long thread scrolls inside its box; start it at the turn under review.
  var current = document.querySelector(".conversation .turn.current");
  if (current) {
    current.parentNode.scrollTop = current.offsetTop - current.parentNode.offsetTop - 8;
  }

  var dataNode = document.getElementById("chart-data");
  if (!dataNode || typeof window.Chart === "undefined") {
    return;
  }
  var data = JSON.parse(dataNode.textContent);
  var Chart = window.Chart;
  // every line at least 3:1 against the white chart (WCAG 1.4.11)
  var palette = ["#2563eb", "#db2777", "#15803d", "#c2410c", "#7c3aed", "#0e7490", "#a16207", "#475569"];
  var kindColours = { memory: "#2563eb", skill: "#15803d", tool: "#c2410c" };

  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  Chart.defaults.font.size = 12;
  Chart.defaults.color = "#475569";
  Chart.defaults.plugins.legend.labels.boxWidth = 12;

  function colour(i) {
    return palette[i % palette.length];
  }

  function draw(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas) {
      return;
    }
    canvas.chart = new Chart(canvas, config);
  }

  function percent(value) {
    const p = value * 100;
    return (Number.isInteger(Math.round(p * 1e6) / 1e6) ? p.toFixed(0) : p.toFixed(1)) + " %";
  }

  // a log axis labels only its powers of ten, as 1e-3: Chart.js's own labels crowd one another
  function powerOfTen(value) {
    const exponent = Math.log10(value);
    return Math.abs(exponent - Math.round(exponent)) < 1e-9 ? "1e" + Math.round(exponent) : "";
  }

  draw("chart-reward", {
    type: "line",
    data: {
      labels: data.reward.labels,
      datasets: data.reward.series.map(function (s, i) {
        return {
          label: s.label, data: s.data, borderColor: colour(i), backgroundColor: colour(i),
          spanGaps: true, tension: 0, pointRadius: 3, borderWidth: 2
        };
      })
    },
    options: {
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { title: { display: true, text: data.reward.axis } },
        y: { title: { display: true, text: "mean reward" } }
      }
    }
  });

  draw("chart-kinds", {
    type: "bar",
    data: {
      labels: data.kinds.labels,
      datasets: data.kinds.series.map(function (s) {
        return { label: s.label, data: s.data, backgroundColor: kindColours[s.label] || "#94a3b8" };
      })
    },
    options: {
      indexAxis: "y",
      scales: {
        x: { stacked: true, min: 0, max: 1, ticks: { callback: percent } },
        y: { stacked: true }
      },
      plugins: { tooltip: { callbacks: { label: function (c) { return c.dataset.label + ": " + percent(c.parsed.x); } } } }
    }
  });

  draw("chart-exploration", {
    type: "bar",
    data: {
      labels: data.exploration.labels,
      datasets: [
        { label: "exploration rate", data: data.exploration.exploration, backgroundColor: "#7c3aed", yAxisID: "y" },
        { label: "min propensity", data: data.exploration.min_propensity, backgroundColor: "#0891b2", yAxisID: "y1" }
      ]
    },
    options: {
      scales: {
        // a few percent is the usual rate: a fixed 0-100% axis would draw it as an empty chart
        y: { min: 0, suggestedMax: 0.02, position: "left", title: { display: true, text: "exploration rate" }, ticks: { callback: percent } },
        y1: {
          type: "logarithmic", position: "right", title: { display: true, text: "min propensity (log)" },
          grid: { drawOnChartArea: false }, ticks: { callback: powerOfTen }
        }
      }
    }
  });

  // Untrusted estimates (unsupported, or of an unsupported target) are grey bars with red crosses;
  // the recommended estimate of each run a star, green, or red where it is unsupported (one colour
  // per dataset, so the legend's marker is the one on the chart); the dashed line is the
  // logging policy's value. The axis stops at the reward's range: a triangle at its edge marks an
  // interval that runs past it.
  var ope = data.ope;
  function pick(values, keep) {
    return values.map(function (v, i) { return keep(i) ? v : null; });
  }
  function edge(flags, at) {
    return flags.map(function (f) { return f ? at : null; });
  }
  var trusted = function (i) { return ope.trusted[i] !== false; };
  draw("chart-ope", {
    type: "bar",
    data: {
      labels: ope.labels,
      datasets: [
        { type: "bar", label: "confidence interval", data: ope.interval,
          backgroundColor: ope.trusted.map(function (t) { return t !== false ? "rgba(37, 99, 235, 0.25)" : "rgba(148, 163, 184, 0.25)"; }),
          borderColor: ope.trusted.map(function (t) { return t !== false ? "#2563eb" : "#64748b"; }),
          borderWidth: 1, barPercentage: 0.5, pointStyle: "rect" },
        { type: "line", label: "estimate", data: pick(ope.value, function (i) { return trusted(i) && !ope.recommended[i]; }),
          showLine: false, pointRadius: 5, pointStyle: "rectRot", backgroundColor: "#2563eb", borderColor: "#2563eb" },
        { type: "line", label: "estimate not to be trusted", data: pick(ope.value, function (i) { return !trusted(i) && !ope.recommended[i]; }),
          showLine: false, pointRadius: 6, pointStyle: "crossRot", borderWidth: 2, backgroundColor: "#dc2626", borderColor: "#dc2626" },
        { type: "line", label: "recommended", data: pick(ope.value, function (i) { return ope.recommended[i] && trusted(i); }),
          showLine: false, pointRadius: 9, pointStyle: "star", borderWidth: 2, backgroundColor: "#16a34a", borderColor: "#16a34a" },
        { type: "line", label: "recommended, unsupported", data: pick(ope.value, function (i) { return ope.recommended[i] && !trusted(i); }),
          showLine: false, pointRadius: 9, pointStyle: "star", borderWidth: 2, backgroundColor: "#dc2626", borderColor: "#dc2626" },
        { type: "line", label: "logging policy", data: ope.logging_value, stepped: "middle", spanGaps: false,
          pointRadius: 0, pointStyle: "line", borderDash: [6, 4], borderWidth: 2, borderColor: "#475569", backgroundColor: "#475569" },
        { type: "line", label: "interval runs past the axis", data: edge(ope.clipped_high, ope.axis[1]),
          showLine: false, pointRadius: 6, pointStyle: "triangle", backgroundColor: "#a16207", borderColor: "#a16207", clip: false },
        { type: "line", label: "interval runs past the axis (below)", data: edge(ope.clipped_low, ope.axis[0]),
          showLine: false, pointRadius: 6, pointStyle: "triangle", rotation: 180, backgroundColor: "#a16207", borderColor: "#a16207", clip: false }
      ]
    },
    options: {
      scales: {
        y: { min: ope.axis[0], max: ope.axis[1], title: { display: true, text: "estimated policy value" } },
        // every estimate keeps its label: rotated, smaller, none skipped
        x: { ticks: { autoSkip: false, maxRotation: 90, minRotation: 50, font: { size: 10 } } }
      },
      plugins: {
        // the legend draws each dataset's own marker, not a colour box: a star is not a cross;
        // one triangle entry stands for both ends
        legend: { labels: { usePointStyle: true, filter: function (item) { return item.text.indexOf("(below)") < 0; } } },
        tooltip: {
          callbacks: {
            afterBody: function (items) {
              var note = items.length ? ope.note[items[0].dataIndex] : "";
              return note ? [note] : [];
            }
          }
        }
      }
    }
  });
})();
