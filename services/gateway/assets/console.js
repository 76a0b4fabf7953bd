// jetcron console: progressive enhancement only. Every page works without
// this file; it adds the live schedule preview, shows only the fields of the
// chosen target type, and asks before forms marked data-confirm.
"use strict";
(function () {
  // Confirmation before destructive or wide actions.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });

  // Only the chosen target type's fields.
  var type = document.getElementById("f-type");
  function showTarget() {
    document.querySelectorAll("[data-target]").forEach(function (block) {
      block.hidden = block.getAttribute("data-target") !== type.value;
    });
  }
  if (type) { type.addEventListener("change", showTarget); showTarget(); }

  // Live preview of the next fires while the schedule or zone is typed.
  var schedule = document.getElementById("f-schedule");
  var zone = document.getElementById("f-timezone");
  var box = document.getElementById("preview");
  if (schedule && zone && box) {
    var timer = null;
    var asked = 0;
    var refresh = function () {
      var mine = ++asked;
      var url = "/ui/preview?schedule=" + encodeURIComponent(schedule.value) +
        "&timezone=" + encodeURIComponent(zone.value);
      fetch(url, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.text() : ""; })
        .then(function (html) {
          // The fragment is rendered and escaped by the server's template.
          if (mine === asked) { box.innerHTML = html; }
        })
        .catch(function () {});
    };
    var later = function () { clearTimeout(timer); timer = setTimeout(refresh, 250); };
    schedule.addEventListener("input", later);
    zone.addEventListener("input", later);
  }
})();
