// The workspace's only script: copy buttons, the plan selector following the chosen account, and
// keyboard access to tables that scroll sideways. Every page works without it.
(function () {
  function status(el, text) {
    var out = document.getElementById(el.getAttribute("data-status") || "");
    if (out) out.textContent = text;
  }
  function fallbackCopy(text) {
    var ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(ta);
    return ok;
  }
  document.addEventListener("click", function (ev) {
    var btn = ev.target instanceof Element ? ev.target.closest("[data-copy]") : null;
    if (!btn) return;
    var src = document.getElementById(btn.getAttribute("data-copy"));
    if (!src) return;
    var text = "value" in src ? src.value : src.textContent;
    var done = function () { status(btn, "Copied to the clipboard."); };
    var fail = function () {
      if (fallbackCopy(text)) done();
      else status(btn, "Select the text and copy it with your keyboard.");
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fail);
    else fail();
  });

  // Admin's "Set plan": choosing an account shows that account's plan.
  document.addEventListener("change", function (ev) {
    var sel = ev.target;
    if (!(sel instanceof HTMLSelectElement) || !sel.hasAttribute("data-plan-select")) return;
    var target = document.getElementById(sel.getAttribute("data-plan-select"));
    var option = sel.options[sel.selectedIndex];
    if (target && option && option.getAttribute("data-plan")) target.value = option.getAttribute("data-plan");
  });

  // A table wider than its box scrolls there; the box takes focus so arrow keys can scroll it.
  function markScrollers() {
    var wraps = document.querySelectorAll(".table-wrap");
    for (var i = 0; i < wraps.length; i++) {
      if (wraps[i].scrollWidth > wraps[i].clientWidth + 1) wraps[i].setAttribute("tabindex", "0");
      else wraps[i].removeAttribute("tabindex");
    }
  }
  markScrollers();
  window.addEventListener("resize", markScrollers);
})();
