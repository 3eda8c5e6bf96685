// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A page that shows a secret once replaces its URL with the list's, so that reloading
  // asks for the list (GET) instead of submitting the form again.
  var replace = document.body.getAttribute("data-replace-url");
  if (replace && window.history && window.history.replaceState) {
    window.history.replaceState(null, "", replace);
  }
  // Copy buttons: data-copy names the element whose text is copied.
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var source = document.getElementById(button.getAttribute("data-copy"));
      var status = document.getElementById(button.getAttribute("data-copy") + "-status");
      var done = function (text) { if (status) { status.textContent = text; } };
      if (navigator.clipboard && source) {
        navigator.clipboard.writeText(source.textContent.trim()).then(
          function () { done("Copied."); },
          function () { done("Copying failed: select the text and copy it by hand."); }
        );
      } else {
        done("Copying is not available here: select the text and copy it by hand.");
      }
    });
  });
  // The tenant switcher deliberately does not submit on change: keyboard users move through
  // the options with the arrow keys, and each move would navigate away (WCAG 3.2.2).
});
