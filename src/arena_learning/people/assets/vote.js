"use strict";
// The vote page. Every text from the server is set with textContent: an answer is shown, never run.
// Who votes is the server's cookie (HttpOnly); the models of a session's votes come back when it ends.
(() => {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token") || "", organiser = params.get("organiser") || "";
  const PENDING = "arena-vote-pending:" + location.port, LAST = "arena-vote-last:" + location.port;
  const KEYS = {"1": "a", "a": "a", "2": "b", "b": "b", "3": "tie", "t": "tie", "4": "both_bad", "x": "both_bad"};
  const SAID = {a: "left", b: "right", tie: "tie", both_bad: "both bad"};
  let current = null;
  let retrying = false;

  function read(store, key, fallback) {
    try { return JSON.parse(store.getItem(key)) ?? fallback; } catch (e) { return fallback; }
  }
  const pending = () => read(localStorage, PENDING, []);
  const savePending = (list) => localStorage.setItem(PENDING, JSON.stringify(list));
  const voterName = () => $("voter").value.trim();

  async function api(method, path, body) {
    const headers = {};
    if (token) headers["X-Arena-Token"] = token;
    if (organiser) headers["X-Arena-Organiser"] = organiser;
    if (body) headers["Content-Type"] = "application/json";
    try {
      const res = await fetch(path, {method, headers, body: body ? JSON.stringify(body) : undefined,
                                     credentials: "same-origin"});
      let data = {};
      try { data = await res.json(); } catch (e) { data = {error: "the server's answer is not JSON"}; }
      return {status: res.status, data};
    } catch (e) {
      return {status: 0, data: {error: "the server does not answer"}};
    }
  }

  function setStatus(text, kind) {
    const s = $("status");
    s.textContent = text;
    s.className = kind || "";
  }

  function setState(state) { document.body.dataset.state = state; }

  function setCount(n) {
    $("count").dataset.count = String(n);
    $("count").textContent = `${n} vote(s) by you`;
  }

  function turns(el, list, user) {
    el.replaceChildren();
    list.forEach((text, k) => {
      const div = document.createElement("div");
      div.className = user ? "turn user" : "turn";
      const head = list.length > 1 ? `Turn ${k + 1}: ` : "";
      if (!user && !text) {
        div.classList.add("empty");
        div.textContent = head + "(empty answer)";
      } else {
        div.textContent = head + text;
      }
      el.appendChild(div);
    });
  }

  function show(data) {
    current = {data, shownAt: performance.now()};
    turns($("prompt"), data.prompt, true);
    turns($("left"), data.left, false);
    turns($("right"), data.right, false);
    $("item").hidden = false;
    setCount(data.votes);
    setState("ready");
  }

  function reveal(rows) {
    const body = $("revealed");
    body.replaceChildren();
    for (const r of rows) {
      const tr = document.createElement("tr");
      for (const text of [r.prompt, r.left || "(an empty answer)", r.right || "(an empty answer)", SAID[r.verdict]]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    $("reveal").hidden = false;
    document.body.dataset.revealed = String(Number(document.body.dataset.revealed || 0) + 1);
  }

  async function next() {
    setState("loading");
    const {status, data} = await api("GET", "/api/next");
    if (status === 401) {
      setState("need-name");
      setStatus("Give your name, then Start.");
      return;
    }
    if (status !== 200) {
      setStatus(data.error || `error ${status}`, "error");
      setState("error");
      return;
    }
    if (data.item === undefined) {
      current = null;
      $("item").hidden = true;
      setCount(data.votes);
      if (data.end_session) {
        setStatus("This session has shown all it can: end it (e) to see the models and go on.");
        setState("session-full");
      } else {
        setStatus("Nothing left to vote on. End the session (e) to see the models. Thank you!");
        setState("done");
      }
      return;
    }
    show(data);
  }

  // Send the waiting votes in order; return false while the server cannot store them (they stay here).
  async function flush() {
    for (let list = pending(); list.length; list = pending()) {
      const entry = list[0];
      const res = await api("POST", "/api/vote", entry.body);
      if (res.status === 200 || (res.status >= 400 && res.status < 500)) {
        savePending(pending().filter((x) => x.body.item !== entry.body.item));
        if (res.status !== 200) {
          setStatus(`Not stored: ${res.data.error}`, "error");
          continue;
        }
        localStorage.setItem(LAST, JSON.stringify({vote_id: res.data.vote_id}));
        document.body.dataset.stored = String(Number(document.body.dataset.stored || 0) + 1);
        if (res.data.reveal) {
          setStatus("Stored. That ended your session: its models are below; a new session begins.");
          reveal(res.data.reveal);
        } else {
          setStatus("Stored. The models are shown when your session ends (e).");
        }
        continue;
      }
      setStatus(`${res.data.error || "The server does not answer"}. ${list.length} vote(s) wait in this page and ` +
                "are sent again in 3 s.", "busy");
      if (!retrying) {
        retrying = true;
        setTimeout(async () => {
          retrying = false;
          if (await flush() && !current) await next();
        }, 3000);
      }
      return false;
    }
    return true;
  }

  async function vote(verdict) {
    if (!current || document.body.dataset.state !== "ready") return;
    const seconds = (performance.now() - current.shownAt) / 1000;
    const body = {item: current.data.item, verdict, seconds};
    savePending([...pending(), {body, shown: current.data}]);  // kept before it is sent: a reload sends it again
    current = null;
    setState("sending");
    await flush();
    await next();
    refreshSummary();
  }

  async function undo() {
    const waiting = pending();
    if (waiting.length) {
      const entry = waiting.pop();
      savePending(waiting);
      setStatus("Undone (it had not been stored yet). Vote on it again.");
      show(entry.shown);
      return;
    }
    const last = read(localStorage, LAST, null);
    if (!last) {
      setStatus("Nothing to undo.");
      return;
    }
    const {status, data} = await api("POST", "/api/undo", {vote_id: last.vote_id});
    if (status !== 200) {
      setStatus(data.error || `error ${status}`, status === 503 ? "busy" : "error");
      return;
    }
    localStorage.removeItem(LAST);
    setStatus(data.undone ? "Undone: your last vote is taken back (its item does not come back)."
                          : "Nothing to undo (already undone).");
    refreshSummary();
  }

  async function endSession() {
    if (pending().length && !(await flush())) return;
    const {status, data} = await api("POST", "/api/end", {});
    if (status !== 200) {
      setStatus(data.error || `error ${status}`, status === 503 ? "busy" : "error");
      return;
    }
    reveal(data.reveal);
    setStatus(data.reveal.length ? "Session ended: its models are below; a new session begins."
                                 : "Session ended (no votes in it); a new session begins.");
    await next();
  }

  async function refreshSummary() {
    if (!$("summary").open) return;
    const {status, data} = await api("GET", "/api/summary");
    if (status !== 200) return;
    const body = $("voters");
    body.replaceChildren();
    for (const f of data.voters) {
      const tr = document.createElement("tr");
      const cells = [f.voter, String(f.votes), `${f.control_fails} of ${f.controls}`, `${f.consistent} of ${f.repeats}`,
                     String(f.fast), f.reasons.join("; ") || "-"];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  async function started(res) {
    if (res.status !== 200) {
      setStatus(res.data.error || `error ${res.status}`, res.status === 503 ? "busy" : "error");
      setState("need-name");
      return;
    }
    $("voter").value = res.data.voter;
    $("voter").blur();  // the keys vote from here on
    setStatus("");
    await flush();
    await next();
  }

  async function start() {
    const voter = voterName();
    if (!voter) {
      setStatus("Give your name first.", "error");
      return;
    }
    await started(await api("POST", "/api/session", {voter}));
  }

  async function resume() {
    const invite = params.get("invite");
    if (invite) {
      const res = await api("POST", "/api/session", {invite});
      params.delete("invite");  // used: the address bar keeps no invitation
      history.replaceState(null, "", location.pathname + (params.toString() ? "#" + params.toString() : ""));
      await started(res);
      return;
    }
    const res = await api("GET", "/api/session");
    if (res.status === 200 && !res.data.voter) {
      setState("need-name");
      setStatus("Give your name, then Start.");
      return;
    }
    await started(res);
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target === $("voter")) {
      if (event.key === "Enter") start();
      return;
    }
    const key = event.key.toLowerCase();
    if (KEYS[key]) vote(KEYS[key]);
    else if (key === "s" && document.body.dataset.state === "ready") next();
    else if (key === "u") undo();
    else if (key === "e") endSession();
  });
  for (const id of ["vote-a", "vote-b", "vote-tie", "vote-bad"]) {
    $(id).addEventListener("click", () => vote($(id).dataset.verdict));
  }
  $("skip").addEventListener("click", () => next());
  $("undo").addEventListener("click", () => undo());
  $("end").addEventListener("click", () => endSession());
  $("start").addEventListener("click", () => start());
  $("summary").addEventListener("toggle", () => refreshSummary());

  document.documentElement.dataset.ready = "1";
  resume();
})();
