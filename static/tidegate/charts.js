/* Draws every plotly chart of the page (a div whose data-plotly-figure names the JSON
   data block of its figure, written by tenants/plotly_div.py), also those that htmx
   swaps in later. */
(function () {
  "use strict";

  function draw(root) {
    if (typeof window.Plotly === "undefined") {
      // plotly.js is still loading (a panel swapped in with its own <script src>)
      window.setTimeout(function () { draw(root); }, 50);
      return;
    }
    var scope = root && root.querySelectorAll ? root : document;
    var charts = Array.prototype.slice.call(scope.querySelectorAll("[data-plotly-figure]"));
    if (scope.matches && scope.matches("[data-plotly-figure]")) { charts.push(scope); }
    charts.forEach(function (element) {
      if (element.dataset.plotlyDrawn) { return; }
      element.dataset.plotlyDrawn = "1";
      var source = document.getElementById(element.dataset.plotlyFigure);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      var config = JSON.parse(element.dataset.plotlyConfig || "{}");
      window.Plotly.newPlot(element, {
        data: figure.data || [],
        layout: figure.layout || {},
        frames: figure.frames || [],
        config: config
      }).then(function () {
        // drawn whole (traces, axes, legend): what a reader, or a test, may look at
        element.dataset.plotlyReady = "1";
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[data-plotly-figure]")) { draw(document); }
  });
  document.addEventListener("htmx:load", function (event) {
    var element = event.detail && event.detail.elt;
    if (element && (element.querySelector && element.querySelector("[data-plotly-figure]") ||
        (element.matches && element.matches("[data-plotly-figure]")))) {
      draw(element);
    }
  });
}());
