/* The battle browser of the arena report. No library, no network.
   Every text from the workspace is written with textContent (or new Option), never as markup. */
(function () {
  "use strict";
  var PAGE = 50;
  var OUT = ["A wins", "B wins", "tie", "no verdict"];
  var byId = function (id) { return document.getElementById(id); };
  var node = byId("arena-index");
  if (!node) { return; }
  var D = JSON.parse(node.textContent);
  var R = D.rows, P = D.prompts, M = D.models, N = D.n;
  var cache = {}, waiting = {};

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function fmt(x) { return x === null || x === undefined ? "-" : (Math.round(x * 100) / 100).toString(); }

  // ---- chunks: inline JSON blocks, or sidecar scripts calling arenaChunk(token, k, data)
  window.arenaChunk = function (token, k, data) {
    if (token !== D.token) { return; }          // a chunk of another report: ignore it
    cache[k] = data;
    if (waiting[k]) { waiting[k].forEach(function (w) { w[0](data); }); delete waiting[k]; }
  };
  function loadChunk(k) {
    if (cache[k]) { return Promise.resolve(cache[k]); }
    var inl = byId("arena-chunk-" + k);
    if (inl) { cache[k] = JSON.parse(inl.textContent); return Promise.resolve(cache[k]); }
    if (!D.chunkDir) {
      return new Promise(function (ok) {  // still being parsed: wait for the document
        document.addEventListener("DOMContentLoaded", function () { ok(loadChunk(k)); });
      });
    }
    return new Promise(function (ok, fail) {
      if (waiting[k]) { waiting[k].push([ok, fail]); return; }
      waiting[k] = [[ok, fail]];
      var s = document.createElement("script");
      s.src = encodeURIComponent(D.chunkDir) + "/chunk-" + k + ".js";
      s.onerror = function () {
        (waiting[k] || []).forEach(function (w) { w[1](new Error("cannot load " + s.src)); });
        delete waiting[k];
      };
      document.head.appendChild(s);
    });
  }

  // ---- filters
  var ui = {
    m1: byId("bb-model1"), m2: byId("bb-model2"), cat: byId("bb-cat"), out: byId("bb-outcome"),
    flag: byId("bb-flag"), q: byId("bb-search"), count: byId("bb-count"), page: byId("bb-page"),
    prev: byId("bb-prev"), next: byId("bb-next"), rows: byId("bb-rows"), detail: byId("bb-detail")
  };
  M.forEach(function (m, i) {
    ui.m1.add(new Option(m, String(i)));
    ui.m2.add(new Option(m, String(i)));
  });
  D.cats.forEach(function (c, i) { ui.cat.add(new Option(c, String(i))); });
  D.flags.forEach(function (f, i) { ui.flag.add(new Option(f, String(1 << i))); });

  var shown = new Int32Array(0), page = 0, selected = -1;
  var lowSnips = null;

  function filter() {
    var m1 = +ui.m1.value, m2 = +ui.m2.value, cat = +ui.cat.value, out = ui.out.value, flag = +ui.flag.value;
    var q = ui.q.value.trim().toLowerCase();
    if (q && !lowSnips) { lowSnips = P.snip.map(function (s) { return s.toLowerCase(); }); }
    var matchPrompt = null;
    if (q) {
      matchPrompt = new Uint8Array(P.snip.length);
      for (var p = 0; p < lowSnips.length; p++) { if (lowSnips[p].indexOf(q) >= 0) { matchPrompt[p] = 1; } }
    }
    var pc = P.cat, ra = R.a, rb = R.b, ro = R.o, rf = R.f, rp = R.p;
    var hit = new Int32Array(N), n = 0;
    for (var i = 0; i < N; i++) {
      var a = ra[i], b = rb[i], o = ro[i];
      if (m1 >= 0 && a !== m1 && b !== m1) { continue; }
      if (m2 >= 0 && a !== m2 && b !== m2) { continue; }
      if (cat >= 0 && pc[rp[i]] !== cat) { continue; }
      if (flag === 0 ? rf[i] !== 0 : (flag > 0 && !(rf[i] & flag))) { continue; }
      if (matchPrompt && !matchPrompt[rp[i]]) { continue; }
      if (out !== "any") {
        if (out === "tie" && o !== 2) { continue; }
        if (out === "none" && o !== 3) { continue; }
        if (out === "decisive" && o > 1) { continue; }
        if (out === "win" || out === "loss") {
          if (o > 1) { continue; }
          var me = m1 >= 0 ? m1 : a;
          var winner = o === 0 ? a : b;
          if ((out === "win") !== (winner === me)) { continue; }
        }
      }
      hit[n++] = i;
    }
    shown = hit.subarray(0, n);
    page = 0;
    render();
  }

  function resultCell(i) {
    var o = R.o[i];
    if (o === 2) { return el("span", "tie", "tie"); }
    if (o === 3) { return el("span", "nov", "no verdict"); }
    return el("span", "win", M[o === 0 ? R.a[i] : R.b[i]] + " wins");
  }

  function render() {
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    if (page >= pages) { page = pages - 1; }
    ui.count.textContent = shown.length.toLocaleString("en") + " of " + N.toLocaleString("en") + " battles";
    ui.count.setAttribute("data-count", String(shown.length));
    ui.page.textContent = "page " + (page + 1) + " of " + pages;
    ui.prev.disabled = page === 0;
    ui.next.disabled = page >= pages - 1;
    var body = document.createDocumentFragment();
    var end = Math.min(shown.length, (page + 1) * PAGE);
    for (var k = page * PAGE; k < end; k++) {
      var i = shown[k], tr = el("tr");
      tr.setAttribute("data-row", String(i));
      if (i === selected) { tr.className = "sel"; }
      add(tr, el("td", "", i + 1));
      var snip = add(tr, el("td", "l", P.snip[R.p[i]]));
      snip.title = P.id[R.p[i]];
      add(tr, el("td", "l", D.cats[P.cat[R.p[i]]]));
      add(tr, el("td", "l", M[R.a[i]]));
      add(tr, el("td", "l", M[R.b[i]]));
      add(tr, el("td", "l")).appendChild(resultCell(i));
      add(tr, el("td", "", R.o[i] === 3 ? "-" : fmt(R.sa[i]) + " : " + fmt(R.sb[i])));
      var fc = add(tr, el("td", "l"));
      D.flags.forEach(function (f, b) { if (R.f[i] & (1 << b)) { add(fc, el("span", "flag", f)); } });
      body.appendChild(tr);
    }
    ui.rows.textContent = "";
    ui.rows.appendChild(body);
  }

  function pre(text) { return el("pre", "", text); }

  function showDetail(i) {
    selected = i;
    Array.prototype.forEach.call(ui.rows.children, function (tr) {
      tr.className = +tr.getAttribute("data-row") === i ? "sel" : "";
    });
    var box = ui.detail;
    box.hidden = false;
    box.textContent = "";
    add(box, el("p", "muted", "loading battle " + (i + 1) + " ..."));
    var k = Math.floor(i / D.chunk);
    loadChunk(k).then(function (c) {
      if (selected !== i) { return; }
      var S = c.s, item = c.r[i - k * D.chunk];
      var a = M[R.a[i]], b = M[R.b[i]], p = R.p[i];
      box.textContent = "";
      box.setAttribute("data-row", String(i));
      add(box, el("h3", "", "Battle " + (i + 1) + ": " + a + " vs " + b));
      var meta = add(box, el("p", "muted"));
      meta.textContent = "prompt " + P.id[p] + " (" + D.cats[P.cat[p]] + "); result: ";
      meta.appendChild(resultCell(i));
      if (R.o[i] !== 3) { meta.appendChild(document.createTextNode("; mean scores " + fmt(R.sa[i]) + " : " + fmt(R.sb[i]))); }
      var turns = item[0], ansA = item[1], ansB = item[2], games = item[3], ref = item[4];
      var why = item[5] || [null, null];
      function reasoning(col, r, n) {  // folded, and labelled: the judge saw only the answer
        if (!r || !S[r[n]]) { return; }
        var d = add(col, el("details", "reasoning"));
        add(d, el("summary", "", "reasoning (not shown to the judge)"));
        add(d, pre(S[r[n]]));
      }
      turns.forEach(function (t, n) {
        add(box, el("h4", "", "Turn " + (n + 1) + ": user"));
        add(box, pre(S[t])).className = "user";
        var pair = add(box, el("div", "pair"));
        var ca = add(pair, el("div")), cb = add(pair, el("div"));
        add(ca, el("b", "", "A: " + a));
        add(ca, pre(ansA && ansA[n] !== undefined ? S[ansA[n]] : "(no answer)")).className = "answer";
        reasoning(ca, why[0], n);
        add(cb, el("b", "", "B: " + b));
        add(cb, pre(ansB && ansB[n] !== undefined ? S[ansB[n]] : "(no answer)")).className = "answer";
        reasoning(cb, why[1], n);
        if (ref && ref[n] !== undefined) { add(box, el("div", "muted", "reference: " + S[ref[n]])); }
      });
      add(box, el("h4", "", games.length + " game" + (games.length === 1 ? "" : "s") + " by the judge"));
      games.forEach(function (g) {
        var first = g[0] === 0 ? a : b, second = g[0] === 0 ? b : a;
        var box2 = add(box, el("div", "game"));
        var v = g[5] === 0 ? first + " (shown first) wins" : g[5] === 1 ? second + " (shown second) wins" :
          g[5] === 2 ? "tie" : "no verdict";
        add(box2, el("div", "", "Shown first: " + first + ", second: " + second + ". " +
          (g[6] ? "FAILED verdict" : "Verdict: " + v) + "; scores " + fmt(g[1]) + " : " + fmt(g[2]) +
          (g[3].length > 1 ? " (per turn " + g[3].map(fmt).join(", ") + " : " + g[4].map(fmt).join(", ") + ")" : "") +
          (g[10] ? "; reply cut off" : "")));
        g[7].forEach(function (f) { add(box2, el("span", "flag", S[f])); });
        if (S[g[8]]) { add(box2, pre(S[g[8]])).className = "explanation"; }
        if (g[9] >= 0 && S[g[9]]) { add(box2, el("div", "muted", "raw reply:")); add(box2, pre(S[g[9]])).className = "raw"; }
      });
    }, function (err) {
      box.textContent = "";
      add(box, el("p", "nov", String(err && err.message ? err.message : err)));
    });
  }

  [ui.m1, ui.m2, ui.cat, ui.out, ui.flag].forEach(function (s) { s.addEventListener("change", filter); });
  var timer = null;
  ui.q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(filter, 150); });
  ui.prev.addEventListener("click", function () { if (page > 0) { page--; render(); } });
  ui.next.addEventListener("click", function () { page++; render(); });
  ui.rows.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr");
    if (tr && tr.hasAttribute("data-row")) { showDetail(+tr.getAttribute("data-row")); }
  });

  // ---- the strengths view: a cell shows the battles behind it (its model, its category)
  function pick(sel, label) {
    for (var k = 0; k < sel.options.length; k++) {
      if (sel.options[k].text === label) { sel.value = sel.options[k].value; return; }
    }
  }
  function showCell(td) {
    pick(ui.m1, td.getAttribute("data-model"));
    pick(ui.cat, td.getAttribute("data-cat"));
    ui.m2.value = "-1"; ui.out.value = "any"; ui.flag.value = "-1"; ui.q.value = "";
    filter();
    byId("battles").scrollIntoView();
  }
  Array.prototype.forEach.call(document.querySelectorAll("td.mg[data-model]"), function (td) {
    td.addEventListener("click", function () { showCell(td); });
    td.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { showCell(td); } });
  });

  filter();
  window.arenaReport = { firstRenderMs: performance.now(), battles: N, show: showDetail, loadChunk: loadChunk };
  document.documentElement.setAttribute("data-ready", "1");
})();
