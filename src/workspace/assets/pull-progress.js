// The admin page's "Add a model from the Hub": starts a pull through the workspace API and
// follows it, replacing the pull's block with the server's rendering of its state until it ends.
// Without this script the form posts and the page shows the state as of the last load.
(function () {
  var form = document.getElementById("hub-pull-form");
  var list = document.getElementById("hub-pulls");
  var failure = document.getElementById("hub-pull-error");
  if (!form || !list || !failure) return;
  var api = form.getAttribute("data-api");
  var csrf = form.querySelector('input[name="_csrf"]');

  function show(error) {
    failure.textContent = error || "";
    failure.hidden = !error;
  }

  function place(job) {
    var holder = document.createElement("div");
    holder.innerHTML = job.html;
    var block = holder.firstElementChild;
    var old = list.querySelector('[data-job="' + job.id + '"]');
    if (old) old.replaceWith(block);
    else list.insertBefore(block, list.firstChild);
  }

  function follow(id) {
    fetch(api + "/" + encodeURIComponent(id), { headers: { accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (res) {
        if (!res.ok) { show(res.body.error || "The pull's state could not be read."); return; }
        place(res.body);
        if (res.body.state === "running") setTimeout(function () { follow(id); }, 400);
      })
      .catch(function () {
        // The server may be busy or restarting: keep asking, a little less often.
        setTimeout(function () { follow(id); }, 2000);
      });
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    show("");
    var button = form.querySelector('button[type="submit"]');
    if (button) button.disabled = true;
    fetch(api, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/x-www-form-urlencoded", "x-csrf-token": csrf ? csrf.value : "" },
      body: new URLSearchParams(new FormData(form)).toString(),
    })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (res) {
        if (!res.ok) { show(res.body.error || "The pull could not be started."); return; }
        place(res.body);
        follow(res.body.id);
      })
      .catch(function () { show("The server did not answer; check that it is running and try again."); })
      .finally(function () { if (button) button.disabled = false; });
  });

  // Pulls started before this page was loaded (or without script) are followed too.
  list.querySelectorAll('[data-state="running"]').forEach(function (block) { follow(block.getAttribute("data-job")); });
})();
