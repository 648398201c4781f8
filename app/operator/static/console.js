// The operator console's only script: a select marked data-autosubmit submits its form on change
// (pages work without it; every form also has a submit button or a noscript one). Picking its empty
// option submits only when it means "any" (data-autosubmit="any", or the model filter).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () {
      if (select.value !== "" || select.name === "model" || select.dataset.autosubmit === "any") {
        select.form.submit();
      }
    });
  });
});
