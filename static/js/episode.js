// Episode viewer: one turn at a time (← → Home End, #turn-N links), the evidence graph as of
// the current turn, recall over turns, token strips and documents loaded on demand.
// Every value from the episode is set with textContent or passed to Plotly through
// HarnessCharts.safe; nothing is written as HTML.
(function () {
  "use strict";
  // Runs before the body is parsed: hide all but the current turn from the first paint.
  document.documentElement.classList.add("js-viewer");

  var H, graph, recall;
  var turns = [];
  var current = null;

  // Turns as people read them: numbered from 1; index 0 is the start (the opening
  // observation), as the strip and the headings say (templatetags/viewer.py turn_name).
  function turnName(turn) {
    return turn === 0 ? "the start" : "turn " + turn;
  }

  function nearestTurn(turn) {
    if (!turns.length) return null;
    if (turns.indexOf(turn) >= 0) return turn;
    var best = turns[0];
    turns.forEach(function (t) { if (Math.abs(t - turn) < Math.abs(best - turn)) best = t; });
    return best;
  }

  function turnFromHash() {
    var match = /^#turn-(\d+)$/.exec(window.location.hash);
    return match ? parseInt(match[1], 10) : null;
  }

  function each(selector, callback) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), callback);
  }

  function show(turn, options) {
    turn = nearestTurn(turn);
    if (turn === null) return;
    current = turn;
    each(".per-turn", function (el) {
      el.classList.toggle("current", parseInt(el.dataset.turn, 10) === turn);
    });
    each(".upto-turn", function (el) {
      el.classList.toggle("later", parseInt(el.dataset.turn, 10) > turn);
    });
    each(".turn-link", function (el) {
      var on = parseInt(el.dataset.turn, 10) === turn;
      el.classList.toggle("current", on);
      if (on) {
        el.setAttribute("aria-current", "step");
        el.scrollIntoView({ block: "nearest", inline: "nearest" });
      } else {
        el.removeAttribute("aria-current");
      }
    });
    updateCounts();
    if (!options || options.hash !== false) {
      window.history.replaceState(null, "", "#turn-" + turn);
    }
    loadTokens(turn);
    if (graph) graph.update(turn);
    if (recall) recall.mark(turn);
  }

  function updateCounts() {
    each(".js-visible-count", function (el) {
      var rows = document.querySelectorAll("#" + el.dataset.for + " .upto-turn:not(.later)");
      el.textContent = String(rows.length);
    });
  }

  function loadTokens(turn) {
    var section = document.getElementById("turn-" + turn);
    var target = section && section.querySelector(".token-strips[data-src]:not([data-loaded])");
    if (!target || !window.htmx) return;
    target.dataset.loaded = "1";
    window.htmx.ajax("GET", target.dataset.src, { target: target, swap: "innerHTML" });
  }

  function step(delta) {
    var at = turns.indexOf(current);
    var next = turns[Math.min(turns.length - 1, Math.max(0, at + delta))];
    show(next);
  }

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" ||
      (target && target.isContentEditable);
  }

  function onKey(event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) return;
    var keys = { ArrowLeft: -1, ArrowRight: 1 };
    if (event.key in keys) step(keys[event.key]);
    else if (event.key === "Home") show(turns[0]);
    else if (event.key === "End") show(turns[turns.length - 1]);
    else return;
    event.preventDefault();
  }

  // Document ids open in the side panel; without scripts the link opens the document page.
  function onClick(event) {
    var link = event.target.closest ? event.target.closest("a") : null;
    if (!link) return;
    if (link.classList.contains("turn-link")) {
      event.preventDefault();
      show(parseInt(link.dataset.turn, 10));
      return;
    }
    var jump = /^#turn-(\d+)$/.exec(link.getAttribute("href") || "");
    if (jump) {
      event.preventDefault();
      show(parseInt(jump[1], 10));
      document.getElementById("turn-" + current).scrollIntoView({ block: "start" });
      return;
    }
    if (link.classList.contains("doc") && window.htmx) {
      event.preventDefault();
      var panel = document.getElementById("doc-viewer");
      window.htmx.ajax("GET", link.href, { target: panel, swap: "innerHTML" }).then(function () {
        panel.scrollIntoView({ block: "nearest" });
      });
    }
  }

  // --- the evidence graph ------------------------------------------------------------------

  // Deterministic pseudo-random numbers, so the same episode always gets the same layout.
  function seeded(seed) {
    return function () {
      seed = (seed + 0x6d2b79f5) | 0;
      var t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // Fruchterman-Reingold on the final graph, once: positions stay put as turns replay.
  function forceLayout(nodes, edges) {
    var n = nodes.length, random = seeded(n + edges.length);
    var x = new Float64Array(n), y = new Float64Array(n);
    // Twice as wide as high, like the panel it is drawn in.
    for (var i = 0; i < n; i++) { x[i] = 2 * (random() - 0.5); y[i] = random() - 0.5; }
    var k = Math.sqrt(1 / Math.max(n, 1)), rounds = n > 600 ? 60 : 140;
    var dx = new Float64Array(n), dy = new Float64Array(n);
    for (var round = 0; round < rounds; round++) {
      var temperature = 0.1 * (1 - round / rounds) + 0.002;
      dx.fill(0); dy.fill(0);
      for (var a = 0; a < n; a++) {
        for (var b = a + 1; b < n; b++) {
          var ex = x[a] - x[b], ey = y[a] - y[b], d2 = ex * ex + ey * ey + 1e-9;
          var push = (k * k) / d2;
          dx[a] += ex * push; dy[a] += ey * push; dx[b] -= ex * push; dy[b] -= ey * push;
        }
      }
      edges.forEach(function (e) {
        var ex = x[e.s] - x[e.t], ey = y[e.s] - y[e.t], d = Math.sqrt(ex * ex + ey * ey) + 1e-9;
        var pull = d / k;
        dx[e.s] -= ex * pull; dy[e.s] -= ey * pull; dx[e.t] += ex * pull; dy[e.t] += ey * pull;
      });
      for (var c = 0; c < n; c++) {
        var len = Math.sqrt(dx[c] * dx[c] + dy[c] * dy[c]) + 1e-9, moved = Math.min(len, temperature);
        x[c] += (dx[c] / len) * moved; y[c] += (dy[c] / len) * moved;
        // Gentle gravity keeps unlinked groups from drifting off the canvas.
        x[c] *= 0.997; y[c] *= 0.99;
      }
    }
    return { x: clampOutliers(x), y: clampOutliers(y) };
  }

  // Unlinked nodes drift far out under repulsion alone and squash the rest of the drawing;
  // pull anything beyond the middle 90 % back to just outside it.
  function clampOutliers(values) {
    if (values.length < 10) return values;
    var sorted = Array.prototype.slice.call(values).sort(function (a, b) { return a - b; });
    var low = sorted[Math.floor(0.05 * sorted.length)], high = sorted[Math.floor(0.95 * sorted.length)];
    var margin = 0.1 * (high - low);
    return values.map(function (v) { return Math.min(high + margin, Math.max(low - margin, v)); });
  }

  // The curated set after each turn, read from that turn's working-memory panel, so the
  // graph fills the documents curated as of the slider's turn rather than at the end.
  function curatedByTurn() {
    var sets = {};
    each(".wm-col .per-turn", function (panel) {
      var ids = {};
      panel.querySelectorAll("ol.curated a.doc").forEach(function (a) { ids[a.textContent] = true; });
      sets[panel.dataset.turn] = ids;
    });
    return sets;
  }

  // A node's label on the drawing: its title, cut short; the hover gives the whole of it.
  function shortLabel(text) {
    var label = String(text);
    return label.length > 18 ? label.slice(0, 17) + "…" : label;
  }

  function Graph(data, element, slider, output, stats) {
    // Edges arrive as [source node index, target node index, turn].
    var edges = data.edges.map(function (e) { return { s: e[0], t: e[1], turn: e[2] }; });
    var curated = curatedByTurn();
    var position = forceLayout(data.nodes, edges);
    var growth = {};
    data.growth.forEach(function (row) { growth[row.turn] = row; });

    function nodeTrace(turn, type) {
      var xs = [], ys = [], text = [], labels = [], sizes = [], fill = [], ring = [], widths = [];
      var curatedNow = curated[String(turn)] || {};
      var colours = { accent: H.cssVar("--accent"), muted: H.cssVar("--muted"),
                      gold: H.cssVar("--gold"), card: H.cssVar("--card"), warn: H.cssVar("--warn"),
                      border: H.cssVar("--border") };
      data.nodes.forEach(function (node, i) {
        if (node.type !== type || node.turn > turn) return;
        xs.push(position.x[i]); ys.push(position.y[i]);
        var fresh = node.turn === turn;
        if (type === "doc") {
          var gold = node.grade > 0;
          var isCurated = curatedNow[node.id.slice(4)] === true;
          text.push(H.safe(node.label) + " · " + H.safe(node.id.slice(4)) +
            (gold ? " · gold (grade " + node.grade + ")" : "") +
            (isCurated ? " · curated as of " + turnName(turn) : "") +
            (node.curated ? " · curated at the end" : "") + " · first shown: " + turnName(node.turn));
          labels.push(H.safe(shortLabel(node.label)));
          sizes.push(fresh ? 15 : 11);
          fill.push(isCurated ? colours.accent : colours.card);
          ring.push(gold ? colours.gold : (fresh ? colours.accent : colours.muted));
          widths.push(gold ? 3 : 1.5);
        } else {
          text.push("bridge: " + H.safe(node.label) + " · " + turnName(node.turn));
          sizes.push(fresh ? 11 : 8);
          fill.push(colours.warn);
          ring.push(colours.border);
          widths.push(0.5);
        }
      });
      var isDoc = type === "doc";
      return {
        type: "scatter", mode: isDoc ? "markers+text" : "markers", x: xs, y: ys,
        text: isDoc ? labels : text, hovertext: text, hoverinfo: "text",
        textposition: "top center", textfont: { size: 10, color: colours.muted },
        name: isDoc ? "documents" : "bridge entities",
        marker: { size: sizes, color: fill, symbol: type === "doc" ? "circle" : "diamond",
                  line: { color: ring, width: widths } },
      };
    }

    function edgeTrace(turn) {
      var xs = [], ys = [];
      edges.forEach(function (e) {
        if (e.turn > turn || data.nodes[e.s].turn > turn || data.nodes[e.t].turn > turn) return;
        xs.push(position.x[e.s], position.x[e.t], null);
        ys.push(position.y[e.s], position.y[e.t], null);
      });
      return { type: "scatter", mode: "lines", x: xs, y: ys, hoverinfo: "skip", name: "links",
               line: { color: H.cssVar("--muted"), width: 0.6 }, opacity: 0.45 };
    }

    function describe(turn) {
      var row = growth[turn];
      if (!row) return "";
      var name = turnName(turn);
      return name.charAt(0).toUpperCase() + name.slice(1) + ": " + row.docs + " documents, " + row.bridges + " bridge entities, " +
        row.components + " connected component" + (row.components === 1 ? "" : "s") +
        " (largest " + row.largest + " documents); gold documents reached " + row.gold_reached +
        " of " + data.gold_total + ", linked to another gold document " + row.gold_linked + "." +
        (data.bridges_drawn < data.bridges_total ? " Drawing the " + data.bridges_drawn +
          " strongest of " + data.bridges_total + " bridges." : "");
    }

    var hidden = { showgrid: false, zeroline: false, showticklabels: false, visible: false };
    this.update = function (turn) {
      slider.value = String(turn);
      output.textContent = turnName(turn);
      stats.textContent = describe(turn);
      var layout = H.layout({ showlegend: false, margin: { l: 8, r: 8, t: 8, b: 8 },
                              xaxis: hidden, yaxis: hidden, hovermode: "closest" });
      if (!window.Plotly) return;  // drawn once plotly.js arrives (HarnessCharts.withPlotly)
      window.Plotly.react(element, [edgeTrace(turn), nodeTrace(turn, "entity"),
                                    nodeTrace(turn, "doc")], layout, H.config);
    };
  }

  // --- recall over turns -----------------------------------------------------------------------

  var EVENT_STYLE = {
    seen: { symbol: "circle-open", colour: "--gold", label: "first seen" },
    added: { symbol: "circle", colour: "--ok", label: "curated" },
    retagged: { symbol: "diamond", colour: "--accent", label: "retagged" },
    evicted: { symbol: "x", colour: "--warn", label: "evicted" },
    removed: { symbol: "x", colour: "--bad", label: "removed" },
  };

  function Recall(data, element) {
    var turn = null;
    function traces() {
      var colours = H.palette();
      var lines = [["curated", "curated recall", "solid"], ["trajectory", "trajectory recall", "dash"],
                   ["final_answer", "final-answer recall", "dot"]].map(function (c, i) {
        return { type: "scatter", mode: "lines+markers", name: c[1], x: data.turns, y: data[c[0]],
                 line: { color: colours[i], dash: c[2], shape: "hv" }, marker: { size: 5 } };
      });
      var events = Object.keys(EVENT_STYLE).map(function (kind) {
        var found = data.gold_events.filter(function (e) { return e.kind === kind; });
        return {
          type: "scatter", mode: "markers", name: "gold " + EVENT_STYLE[kind].label, yaxis: "y2",
          x: found.map(function (e) { return e.turn; }),
          y: found.map(function (e) { return H.safe(e.doc); }),
          text: found.map(function (e) {
            return H.safe(e.doc) + " (grade " + e.grade + ") " + EVENT_STYLE[kind].label + ": " + turnName(e.turn);
          }),
          hoverinfo: "text",
          marker: { symbol: EVENT_STYLE[kind].symbol, size: kind === "seen" ? 17 : 10, color: H.cssVar(EVENT_STYLE[kind].colour),
                    line: { width: 2, color: H.cssVar(EVENT_STYLE[kind].colour) } },
        };
      });
      return lines.concat(events);
    }
    function layout() {
      var shapes = turn === null ? [] : [{ type: "line", xref: "x", yref: "paper", x0: turn, x1: turn,
        y0: 0, y1: 1, line: { color: H.cssVar("--accent"), width: 1, dash: "dot" } }];
      var gold = data.gold.length > 0;
      return H.layout({
        shapes: shapes,
        legend: { orientation: "h", y: -0.14 },
        margin: { l: 90, r: 16, t: 16, b: 90 },
        // Anchored to the lower plot, so the shared turn axis sits at the bottom.
        xaxis: H.axis({ title: { text: "turn (0: the start)" }, dtick: data.turns.length > 30 ? 5 : 1,
                        anchor: gold ? "y2" : "y" }),
        yaxis: H.axis({ range: [0, 1.05], title: { text: "recall" }, domain: gold ? [0.42, 1] : [0, 1] }),
        yaxis2: H.axis({ domain: [0, 0.32], type: "category", visible: gold,
                         categoryarray: data.gold.map(H.safe), categoryorder: "array" }),
        height: gold ? 460 : 320,
      });
    }
    this.draw = function () { window.Plotly.react(element, traces(), layout(), H.config); };
    this.mark = function (at) {
      turn = at;
      if (element.data) window.Plotly.relayout(element, { shapes: layout().shapes });
    };
  }

  // --- wiring ------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", function () {
    H = window.HarnessCharts;
    each(".turn-link", function (el) { turns.push(parseInt(el.dataset.turn, 10)); });
    if (!turns.length) return;
    var graphData = H && H.readJson("graph-data");
    var graphElement = document.getElementById("graph-plot");
    var slider = document.getElementById("graph-turn");
    if (graphData && graphElement && slider) {
      graph = new Graph(graphData, graphElement, slider, document.getElementById("graph-turn-out"),
                        document.getElementById("graph-stats"));
      slider.addEventListener("input", function () { show(parseInt(slider.value, 10)); });
    }
    var recallData = H && H.readJson("recall-data");
    var recallElement = document.getElementById("recall-plot");
    if (recallData && recallElement) recall = new Recall(recallData, recallElement);
    document.addEventListener("keydown", onKey);
    document.addEventListener("click", onClick);
    window.addEventListener("hashchange", function () {
      var turn = turnFromHash();
      if (turn !== null) show(turn, { hash: false });
    });
    var initial = turnFromHash();
    show(initial === null ? turns[turns.length - 1] : initial, { hash: initial !== null });
    if (initial !== null) document.getElementById("turn-" + current).scrollIntoView();
    if (H) {
      H.withPlotly(function () {
        if (recall) recall.draw();
        if (graph) graph.update(current);
        H.onThemeChange(function () {
          if (recall) recall.draw();
          if (graph) graph.update(current);
        });
      });
    }
  });
})();
