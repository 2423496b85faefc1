// The workspace's only script: copy buttons. Every page works without it.
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
})();
