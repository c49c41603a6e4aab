/* The portal's small behaviours, without inline handlers (the Content-Security-Policy
   forbids them): a form marked data-confirm asks before it is sent (once, however often
   it is clicked); a select marked
   data-autosubmit sends its form when changed. */
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm !== undefined) {
      // a double click sends once and asks once: the second submit is dropped
      if (form.dataset.sending !== undefined) { event.preventDefault(); return; }
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); return; }
      form.dataset.sending = "";
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
