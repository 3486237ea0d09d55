// The usage dashboard's charts, drawn by the vendored Chart.js from the figures the page
// carries as JSON. Colours come from the admin's theme variables, so the charts follow
// the light and dark themes (and are redrawn when the theme toggle switches them).
(function () {
  "use strict";
  const source = document.getElementById("llmchat-dashboard-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const charts = [];
  const PALETTE = ["#417690", "#e0a030", "#5b9b5b", "#b0503c", "#8a6ab8", "#3b9ea8", "#c06090", "#7a7a7a"];

  function themeColor(name, fallback) {
    const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function usd(value) {
    return "$" + Number(value).toLocaleString(undefined, { maximumFractionDigits: 6 });
  }

  function draw() {
    while (charts.length) charts.pop().destroy();
    Chart.defaults.color = themeColor("--body-quiet-color", "#666");
    Chart.defaults.borderColor = themeColor("--hairline-color", "#e8e8e8");
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.animation = false; // figures, not a show: drawn at once, also in print
    Chart.defaults.maintainAspectRatio = false;
    const danger = themeColor("--error-fg", "#ba2121");
    const make = (id, config) => {
      const canvas = document.getElementById(id);
      if (canvas) charts.push(new Chart(canvas, config));
    };

    make("chart-spend", {
      data: {
        labels: data.labels,
        datasets: [
          { type: "bar", label: "spend (USD)", data: data.cost, backgroundColor: PALETTE[0], yAxisID: "y" },
          {
            type: "line", label: "failed attempts", data: data.failed, borderColor: danger,
            backgroundColor: danger, yAxisID: "failed", tension: 0.2, pointRadius: 2,
          },
        ],
      },
      options: {
        interaction: { mode: "index", intersect: false },
        scales: {
          y: { beginAtZero: true, ticks: { callback: usd } },
          failed: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, ticks: { precision: 0 } },
        },
        plugins: { tooltip: { callbacks: { label: (c) => c.dataset.yAxisID === "y" ? `spend ${usd(c.parsed.y)}` : `${c.parsed.y} failed` } } },
      },
    });

    const names = { input_tokens: "input", output_tokens: "output", cache_read_tokens: "cache read", cache_write_tokens: "cache write" };
    make("chart-tokens", {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: Object.keys(names).map((key, i) => ({
          label: names[key], data: data.tokens[key], backgroundColor: PALETTE[i],
        })),
      },
      options: {
        interaction: { mode: "index", intersect: false },
        scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } },
      },
    });

    make("chart-models", {
      type: "bar",
      data: {
        labels: data.models,
        datasets: [{ label: "spend (USD)", data: data.model_cost, backgroundColor: data.models.map((_, i) => PALETTE[i % PALETTE.length]) }],
      },
      options: {
        indexAxis: "y",
        plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => usd(c.parsed.x) } } },
        scales: { x: { beginAtZero: true, ticks: { callback: usd } } },
      },
    });

    const statusColors = { succeeded: PALETTE[2], failed: danger, cancelled: PALETTE[1], pending: PALETTE[7] };
    make("chart-status", {
      type: "doughnut",
      data: {
        labels: data.statuses,
        datasets: [{
          data: data.status_attempts,
          backgroundColor: data.statuses.map((s) => statusColors[s] || PALETTE[7]),
          borderColor: themeColor("--body-bg", "#fff"),
        }],
      },
      options: { plugins: { legend: { position: "right" } } },
    });
    document.documentElement.dataset.llmchatCharts = String(charts.length);
  }

  draw();
  // the admin's theme toggle sets data-theme on <html>; the OS setting may change too
  new MutationObserver(draw).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", draw);
})();
