/* The portal's small behaviours, without inline handlers (the Content-Security-Policy
   forbids them): a form marked data-confirm asks before it is sent; a select marked
   data-autosubmit sends its form when changed. */
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm !== undefined) {
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
    }
  }, true);

  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined &&
        field.form) {
      if (typeof field.form.requestSubmit === "function") {
        field.form.requestSubmit();
      } else {
        field.form.submit();
      }
    }
  });
}());

/* A panel marked data-poll-when-visible refreshes itself (htmx polling) only while the
   page is in view: a hidden tab asks the server for nothing. */
document.addEventListener("htmx:beforeRequest", function (event) {
  "use strict";
  var element = event.detail && event.detail.elt;
  if (element && element.hasAttribute("data-poll-when-visible") &&
      document.visibilityState !== "visible") {
    event.preventDefault();
  }
});
