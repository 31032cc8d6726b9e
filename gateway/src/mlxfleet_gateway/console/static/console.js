// mlxfleet console: live parts, node details, admin actions and the playground.
// Plain script, no build step, nothing fetched from elsewhere (served by the gateway itself).
"use strict";

(function () {
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  function flash(text, bad) {
    const el = document.getElementById("flash");
    if (!el) return;
    el.textContent = text;
    el.className = bad ? "bad" : "ok";
    el.hidden = false;
  }

  async function problem(resp) {
    try {
      const body = await resp.json();
      return (body.error && body.error.message) || resp.statusText;
    } catch (e) {
      return resp.status + " " + resp.statusText;
    }
  }

  // ---- live parts: fetched every second, put in place when they changed -------------------
  function startLive() {
    const box = document.getElementById("live");
    if (!box || !box.dataset.live) return;
    let last = box.innerHTML;
    let busy = false;
    const every = Number(box.dataset.every || 1000);
    async function tick() {
      if (busy || document.hidden) return;
      busy = true;
      try {
        const resp = await fetch(box.dataset.live, { credentials: "same-origin", cache: "no-store" });
        if (resp.status === 401) {
          window.location.assign("/console/login");
          return;
        }
        if (resp.ok) {
          const html = await resp.text();
          if (html !== last) {
            box.innerHTML = html;
            last = html;
            box.dispatchEvent(new CustomEvent("live-updated"));
          }
        }
      } catch (e) {
        // the gateway restarts or the network blinks: the next tick tries again
      } finally {
        busy = false;
      }
    }
    window.setInterval(tick, every);
  }

  // ---- node details: Events and agent logs ----------------------------------------------
  async function showNode(name) {
    const panel = document.getElementById("detail");
    const body = document.getElementById("detail-body");
    body.textContent = "loading " + name + " ...";
    panel.hidden = false;
    const resp = await fetch("/console/nodes/" + encodeURIComponent(name), { credentials: "same-origin" });
    if (resp.ok) {
      body.innerHTML = await resp.text();
    } else {
      body.textContent = "could not load " + name + ": " + resp.status;
    }
  }

  // ---- admin actions: JSON to /admin/v1 with the session's CSRF token -----------------------
  async function call(method, url, payload) {
    const init = {
      method: method,
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf(), Accept: "application/json" },
    };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    const resp = await fetch(url, init);
    if (!resp.ok) throw new Error(await problem(resp));
    return resp.json();
  }

  function formPayload(form) {
    const out = {};
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") {
        if (el.checked) out[el.name] = [el.value];
        continue;
      }
      const v = el.value.trim();
      if (v === "") continue;
      if (el.dataset.json !== undefined) out[el.name] = JSON.parse(v);
      else if (el.type === "number") out[el.name] = Number(v);
      else out[el.name] = v;
    }
    return out;
  }

  document.addEventListener("click", async (ev) => {
    const target = ev.target instanceof Element ? ev.target : null;
    if (!target) return;
    const close = target.closest("[data-close]");
    if (close) {
      document.getElementById("detail").hidden = true;
      return;
    }
    const approve = target.closest("[data-approve]");
    if (approve) {
      approve.disabled = true;
      try {
        const r = await call("POST", approve.dataset.approve);
        flash("Approved " + r.namespace + "/" + r.name + " as " + r.by, false);
      } catch (e) {
        approve.disabled = false;
        flash("Approve refused: " + e.message, true);
      }
      return;
    }
    const action = target.closest("[data-api]");
    if (action) {
      if (action.dataset.confirm && !window.confirm(action.dataset.confirm)) return;
      try {
        const r = await call(action.dataset.method || "POST", action.dataset.api);
        if (r.key) showSecret(r.name, r.key);
        else flash("Done: " + (r.name || "ok"), false);
      } catch (e) {
        flash(e.message, true);
      }
      return;
    }
    const node = target.closest("[data-node]");
    if (node) showNode(node.dataset.node);
  });

  document.addEventListener("keydown", (ev) => {
    const target = ev.target instanceof Element ? ev.target.closest("[data-node]") : null;
    if (target && (ev.key === "Enter" || ev.key === " ")) {
      ev.preventDefault();
      showNode(target.dataset.node);
    }
  });

  function showSecret(name, key) {
    const el = document.getElementById("new-key-shown");
    if (!el) return flash("New key for " + name + ": " + key, false);
    el.textContent = "API key " + name + " (shown once, store it now): " + key;
    el.hidden = false;
  }

  document.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.apiForm) return;
    ev.preventDefault();
    try {
      const r = await call(form.dataset.method || "POST", form.dataset.apiForm, formPayload(form));
      if (r.key) showSecret(r.name, r.key);
      else flash("Saved", false);
      if (form.id === "new-key") form.reset();
    } catch (e) {
      flash(e.message, true);
    }
  });

  document.addEventListener("change", (ev) => {
    const el = ev.target;
    if (el instanceof HTMLSelectElement && el.dataset.autosubmit !== undefined) el.form.submit();
  });

  // ---- playground: streaming chat against /v1 with the viewer's API key -------------------
  function playground() {
    const form = document.getElementById("playground");
    if (!form) return;
    const keyInput = document.getElementById("pg-key");
    const pickA = document.getElementById("pg-model-a");
    const pickB = document.getElementById("pg-model-b");
    const compare = document.getElementById("pg-compare");
    keyInput.value = sessionStorage.getItem("mlxfleet-playground-key") || "";
    compare.addEventListener("change", () => {
      pickB.disabled = !compare.checked;
      document.getElementById("pg-b").hidden = !compare.checked;
    });

    async function loadModels() {
      sessionStorage.setItem("mlxfleet-playground-key", keyInput.value.trim());
      const resp = await fetch("/v1/models", {
        headers: { Authorization: "Bearer " + keyInput.value.trim() },
        credentials: "omit",
      });
      if (!resp.ok) {
        flash("models: " + (await problem(resp)), true);
        return;
      }
      const names = (await resp.json()).data.map((m) => m.id);
      for (const pick of [pickA, pickB]) {
        pick.replaceChildren(...names.map((n) => new Option(n, n)));
      }
      if (names.length > 1) pickB.value = names[1];
      flash(names.length + " model(s) this key may use", false);
    }
    document.getElementById("pg-load").addEventListener("click", loadModels);
    if (keyInput.value) loadModels();

    async function stream(model, box) {
      const name = box.querySelector(".pg-name");
      const stats = box.querySelector(".pg-stats");
      const text = box.querySelector(".pg-text");
      name.textContent = model;
      text.textContent = "";
      stats.textContent = "waiting for the first token ...";
      box.dataset.state = "streaming";
      const t0 = performance.now();
      let first = null;
      let usage = null;
      let events = 0;
      const resp = await fetch("/v1/chat/completions", {
        method: "POST",
        credentials: "omit",
        headers: {
          Authorization: "Bearer " + keyInput.value.trim(),
          "Content-Type": "application/json",
        },
        body: JSON.stringify({
          model: model,
          stream: true,
          stream_options: { include_usage: true },
          max_tokens: Number(document.getElementById("pg-max").value) || 64,
          messages: [{ role: "user", content: document.getElementById("pg-prompt").value }],
        }),
      });
      if (!resp.ok) {
        stats.textContent = "refused: " + (await problem(resp));
        box.dataset.state = "error";
        return;
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const raw = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of raw.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]") continue;
            const ev = JSON.parse(data);
            if (ev.error) {
              stats.textContent = "error: " + ev.error.message;
              box.dataset.state = "error";
              return;
            }
            if (ev.usage) usage = ev.usage;
            const delta = ev.choices && ev.choices[0] && ev.choices[0].delta;
            if (delta && delta.content) {
              if (first === null) first = performance.now();
              events += 1;
              text.textContent += delta.content;
            }
          }
        }
      }
      const end = performance.now();
      const tokens = usage ? usage.completion_tokens : events;
      const ttft = first === null ? null : first - t0;
      const rate = first !== null && end > first ? (tokens / ((end - first) / 1000)) : null;
      stats.textContent =
        "TTFT " + (ttft === null ? "-" : ttft.toFixed(0) + " ms") +
        " · " + (rate === null ? "-" : rate.toFixed(1)) + " tokens/s · " + tokens + " tokens";
      box.dataset.state = "done";
      box.dataset.tokens = String(tokens);
    }

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const runs = [stream(pickA.value, document.getElementById("pg-a"))];
      if (compare.checked) runs.push(stream(pickB.value, document.getElementById("pg-b")));
      try {
        await Promise.all(runs);
      } catch (e) {
        flash("chat: " + e.message, true);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    window.__consoleLoadedAt = window.__consoleLoadedAt || Date.now();
    startLive();
    playground();
  });
})();
