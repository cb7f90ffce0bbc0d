// The explorer page's script (oodcorr.jobs.figures.explorer): draws the heatmap, the forest plots and the
// table from the JSON document embedded in the page. No library, no request: everything it shows
// is in the page.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const R = D.rows, V = R.values, BM = D.by_model;
  const NROWS = R.x.length;
  const S = D.settings || {};
  const state = { panel: D.first_panel || 0, view: -1, order: "cluster", names: "", match: "both",
                  hidden: new Set(), selected: -1, sort: { col: null, dir: 1 } };
  const layout = { s: 10, left: 0, top: 0, axis: [], visible: new Set(), cell: new Map() };

  // ---- colours: the diverging scale of the PNG heatmaps (RdBu_r, -1 blue to +1 red) ----
  const STOPS = ["#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
                 "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f"].map(hex);
  function hex(h) { return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); }
  function colour(r, faded) {
    const t = Math.max(0, Math.min(1, (r + 1) / 2)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(t)), f = t - i;
    let c = STOPS[i].map((v, k) => v + f * (STOPS[i + 1][k] - v));
    if (faded) c = c.map((v) => 0.4 * v + 0.6 * 255);
    return "rgb(" + c.map(Math.round).join(",") + ")";
  }
  const fmt = (v, d) => (v === null || v === undefined || v === "" ? "n/a"
    : (typeof v === "number" ? (Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : v.toFixed(d === undefined ? 2 : d)) : String(v)));
  const sgn = (v) => (v === null ? "n/a" : (v >= 0 ? "+" : "") + v.toFixed(2));
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const val = (col, i) => (V[col] ? V[col][i] : null);

  // ---- filters ----
  function patterns() {
    return state.names.split(/[,\s]+/).filter(Boolean).map((p) =>
      new RegExp("^" + p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$", "i"));
  }
  function nameMatches(pats, name) { return !pats.length || pats.some((re) => re.test(name)); }
  function rowsOfPanel(p) { const out = []; for (let i = 0; i < NROWS; i++) if (R.panel[i] === p) out.push(i); return out; }
  function visibleRows() {
    const pats = patterns(), out = [];
    for (const i of rowsOfPanel(state.panel)) {
      if (state.hidden.has(R.verdict[i])) continue;
      const a = nameMatches(pats, D.names[R.x[i]]), b = nameMatches(pats, D.names[R.y[i]]);
      if (state.match === "both" ? a && b : a || b) out.push(i);
    }
    return out;
  }
  function axisNames(vis) {
    const panel = D.panels[state.panel], pats = patterns();
    let order = panel.order.slice();
    if (state.order === "name") order.sort((a, b) => D.names[a].localeCompare(D.names[b], undefined, { numeric: true }));
    if (!pats.length) return order;
    if (state.match === "both") return order.filter((n) => nameMatches(pats, D.names[n]));
    const keep = new Set(); for (const i of vis) { keep.add(R.x[i]); keep.add(R.y[i]); }
    return order.filter((n) => keep.has(n));
  }

  // ---- the heatmap ----
  function cellValue(i) {
    if (state.view < 0) return val("r_consensus", i);
    return BM.r[i][state.view];
  }
  function cellFaded(i) {
    if (state.view < 0) return D.verdicts[R.verdict[i]].faded && !R.every_run[i];
    const lo = BM.lo[i][state.view], hi = BM.hi[i][state.view];
    return lo === null || hi === null || (lo <= 0 && hi >= 0);
  }
  function countVerdicts() {  // the pairs of the table shown, per verdict (the legend's numbers)
    const counts = new Map();
    for (const i of rowsOfPanel(state.panel)) counts.set(R.verdict[i], (counts.get(R.verdict[i]) || 0) + 1);
    for (const el of document.querySelectorAll("[data-count]")) el.textContent = String(counts.get(Number(el.dataset.count)) || 0);
  }
  function draw() {
    countVerdicts();
    const vis = visibleRows();
    layout.visible = new Set(vis);
    const axis = axisNames(vis);
    layout.axis = axis;
    const pos = new Map(axis.map((n, k) => [n, k]));
    const k = Math.max(axis.length - 1, 1);
    const box = $("canvas-box").clientWidth || 700;
    const s = Math.max(4, Math.min(44, Math.floor((Math.max(box, 420) - 200) / k)));
    const font = Math.max(7, Math.min(12, s - 1));
    const cv = $("heat"), ctx = cv.getContext("2d");
    ctx.font = font + "px system-ui, sans-serif";
    const shortName = (n) => (D.labels ? D.labels[n] : D.names[n]);  // without the names' common start
    let label = 0; for (const n of axis) label = Math.max(label, ctx.measureText(shortName(n)).width);
    label = Math.min(label, 240) + 6;
    const dpr = window.devicePixelRatio || 1, W = label + k * s + 10, H = 8 + k * s + label;
    cv.width = W * dpr; cv.height = H * dpr; cv.style.width = W + "px"; cv.style.height = H + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    Object.assign(layout, { s: s, left: label, top: 8, k: k });
    layout.cell = new Map();
    for (const i of vis) {
      let a = pos.get(R.x[i]), b = pos.get(R.y[i]);
      if (a === undefined || b === undefined || a === b) continue;
      const row = Math.max(a, b) - 1, col = Math.min(a, b);
      layout.cell.set(row * 100000 + col, i);
      const x = label + col * s, y = 8 + row * s, v = cellValue(i);
      ctx.fillStyle = v === null ? "#dbdbdb" : colour(v, cellFaded(i));
      ctx.fillRect(x, y, s, s);
      if (state.view < 0) {
        const st = D.verdicts[R.verdict[i]];
        if (st.framed && s >= 5) { ctx.strokeStyle = "#000"; ctx.lineWidth = s >= 10 ? 1.6 : 1; ctx.setLineDash([]); ctx.strokeRect(x + 1, y + 1, s - 2, s - 2); }
        else if (st.dashed && s >= 6) { ctx.strokeStyle = "#666"; ctx.lineWidth = 0.8; ctx.setLineDash([2, 2]); ctx.strokeRect(x + 1.5, y + 1.5, s - 3, s - 3); ctx.setLineDash([]); }
        else if (st.dotted && s >= 6) dottedFrame(ctx, x, y, s);
        const mark = R.every_run[i] ? D.every_run_mark : st.mark;
        const text = s >= 34 && v !== null ? sgn(v) + mark : mark;
        if (text && s >= 12) {
          ctx.fillStyle = Math.abs(v || 0) > 0.6 && !cellFaded(i) ? "#fff" : "#000"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
          ctx.font = (st.framed ? "bold " : "") + Math.min(12, s / 3.2) + "px system-ui, sans-serif";
          ctx.fillText(text, x + s / 2, y + s / 2 + 0.5);
          ctx.font = font + "px system-ui, sans-serif";
        }
      } else {
        const p = BM.p_adj[i][state.view];
        if (p !== null && p < (S.alpha || 0.05) && s >= 6) { ctx.fillStyle = "#000"; ctx.beginPath(); ctx.arc(x + s / 2, y + s / 2, Math.max(1.2, s / 7), 0, 6.3); ctx.fill(); }
      }
      if (i === state.selected) { ctx.strokeStyle = "#00c"; ctx.lineWidth = 2; ctx.strokeRect(x, y, s, s); }
    }
    ctx.fillStyle = "#222"; ctx.textBaseline = "middle";
    if (s >= 6 || axis.length <= 80) {
      ctx.textAlign = "right";
      for (let r = 1; r < axis.length; r++) ctx.fillText(shortName(axis[r]), label - 4, 8 + (r - 1) * s + s / 2, label - 6);
      ctx.save(); ctx.textAlign = "right";
      for (let c = 0; c < axis.length - 1; c++) {
        ctx.save(); ctx.translate(label + c * s + s / 2, 8 + k * s + 4); ctx.rotate(-Math.PI / 2);
        ctx.fillText(shortName(axis[c]), 0, 0, label - 6); ctx.restore();
      }
      ctx.restore();
    }
    const panel = D.panels[state.panel];
    const what = state.view < 0 ? "consensus across " + D.models.length + " models" : "model " + D.models[state.view] + " (pooled over its runs)";
    $("status").textContent = vis.length + " of " + panel.pairs + " pairs shown (" + (axis.length) + " testsets); " + what +
      "; in-domain " + panel.in_domain + (panel.pool_group && panel.pool_group !== "all runs" ? " (" + panel.pool_group + ")" : "") +
      ", " + panel.method + ", " + panel.residualiser + ". Hover a cell for its numbers, click it for its forest plot." +
      (D.prefix ? " Testsets named without their common start '" + D.prefix + "'." : "");
    $("heat").dataset.shown = String(layout.cell.size);
    drawLegend();
    drawTable(vis);
  }
  function drawLegend() {
    const parts = [];
    if (state.view < 0) {
      parts.push("colour: the consensus r across models (blue negative, red positive)");
      for (const v of D.verdicts) {
        let how = v.framed ? "framed" : v.dashed ? "dashed frame" : v.dotted ? "dotted frame" : "";
        if (v.mark) how += (how ? ", " : "") + "'" + v.mark + "'";
        if (v.faded) how += (how ? ", " : "") + "faded";
        parts.push(esc(v.name) + (how ? ": " + how : ""));
      }
      if (rowsOfPanel(state.panel).some((i) => R.every_run[i]))
        parts.push("'" + esc(D.every_run_mark) + "', not faded: no statement across models, but significant with one sign in each model's own run (a fact about these runs, not a prediction)");
      parts.push(...measuredLegend());
    } else {
      parts.push("colour: the model's pooled r; faded: its " + Math.round(100 * (S.level || 0.95)) + " % interval spans 0; dot: p_adj < " + (S.alpha || 0.05));
    }
    $("legend").innerHTML = parts.join(" · ");
  }
  function cellAt(ev) {
    const rect = $("heat").getBoundingClientRect();
    const x = ev.clientX - rect.left - layout.left, y = ev.clientY - rect.top - layout.top;
    if (x < 0 || y < 0) return -1;
    const col = Math.floor(x / layout.s), row = Math.floor(y / layout.s);
    const i = layout.cell.get(row * 100000 + col);
    return i === undefined ? -1 : i;
  }
  function models(i) {
    return "models positive / negative: " + fmt(val("n_positive", i), 0) + " / " + fmt(val("n_negative", i), 0) +
      " (significant: " + fmt(val("n_sig_positive", i), 0) + " / " + fmt(val("n_sig_negative", i), 0) + ")";
  }
  function tipText(i) {
    const pair = "<b>" + esc(D.names[R.x[i]]) + " × " + esc(D.names[R.y[i]]) + "</b><br>";
    const verdict = "verdict: <b>" + esc(D.verdicts[R.verdict[i]].name) + "</b><br>";
    const cons = "consensus r " + sgn(val("r_consensus", i)) + " [" + sgn(val("ci_low_consensus", i)) + ", " + sgn(val("ci_high_consensus", i)) + "]<br>";
    if (state.view >= 0) {
      const m = state.view;
      return pair + "model " + esc(D.models[m]) + ": r " + sgn(BM.r[i][m]) + " [" + sgn(BM.lo[i][m]) + ", " + sgn(BM.hi[i][m]) +
        "], p_adj " + fmt(BM.p_adj[i][m], 3) + "<br>" + modelTasksTip(i, m) + verdict + cons + models(i) + measuredTip(i);
    }
    const extra = ["pi_low_consensus", "tol_low_consensus"].filter((c) => V[c]).map((c) => {
      const hi = c.replace("_low_", "_high_");
      return (c.startsWith("pi") ? "prediction interval" : "tolerance bounds") + " [" + sgn(val(c, i)) + ", " + sgn(val(hi, i)) + "]";
    });
    return pair + verdict + cons + (extra.length ? extra.join("; ") + "<br>" : "") + models(i) + measuredTip(i);
  }
  function onMove(ev) {
    const i = cellAt(ev), tip = $("tip");
    if (i < 0) { tip.hidden = true; return; }
    tip.innerHTML = tipText(i);
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 390) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  }

  // ---- the forest plot of one pair, from the numbers ----
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // a name too long for its column, cut at the left: "…" and the end that tells names apart (a
  // suite's models share their start); the whole name is the element's hover title
  function fitLeft(el, name, width) {
    el.textContent = name;
    if (el.getComputedTextLength() > width) {
      let lo = 1, hi = name.length - 1;  // the most characters of the end that fit after "…"
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        el.textContent = "…" + name.slice(-mid);
        if (el.getComputedTextLength() <= width) lo = mid; else hi = mid - 1;
      }
      el.textContent = "…" + name.slice(-lo);
    }
    el.appendChild(svgEl("title", {}, name));
  }
  function select(i) {
    state.selected = i;
    draw();
    const x = D.names[R.x[i]], y = D.names[R.y[i]], panel = D.panels[R.panel[i]];
    $("pair-title").textContent = x + " × " + y + ", in-domain " + panel.in_domain;
    $("pair-verdict").textContent = "verdict: " + D.verdicts[R.verdict[i]].name;
    $("pair-swatch").hidden = false;
    $("pair-raw").hidden = false;
    $("pair-swatch").style.background = cellValue(i) === null ? "#dbdbdb" : colour(cellValue(i), cellFaded(i));
    $("pair-why").textContent = val("reason", i) ? "why: " + val("reason", i) : "";
    $("pair-way").textContent = val("way_on", i) ? "what would resolve it: " + val("way_on", i) : "";
    $("pair-numbers").textContent = numbersLine(i);
    $("pair-measured").textContent = measuredLines(i).join("; ");
    $("detail").dataset.pair = x + "+" + y;
    forest(i);
    const cells = D.columns.map((c) => "<tr><th>" + esc(c) + "</th><td>" + esc(fmt(V[c][i], 4)) + "</td></tr>");
    $("pair-table").innerHTML = cells.join("");
  }
  function numbersLine(i) {  // the row's main numbers in words; every column is in the table below
    const n = val("n_models_consensus", i), out = [];
    out.push("consensus of " + fmt(n, 0) + " models " + interval(val("r_consensus", i), val("ci_low_consensus", i), val("ci_high_consensus", i)));
    if (typeof val("pi_low_consensus", i) === "number") out.push("a further model expected in [" + sgn(val("pi_low_consensus", i)) + ", " + sgn(val("pi_high_consensus", i)) + "]");
    out.push(models(i));
    return out.join("; ");
  }
  function forest(i) {
    const svg = $("forest"); svg.replaceChildren();
    const ms = D.models.map((m, k) => k).filter((k) => BM.r[i][k] !== null || (BM.runs && BM.runs[i][k].length));
    const rowH = 18, top = 10, nameW = 150, plotW = 260, numW = 150;
    const more = consensusRows(i), tw = tasksWidth(i, ms), rows = ms.length + 3 + more.length;
    const H = top + rows * rowH + 40 + (tw ? 14 : 0), W = nameW + plotW + numW + tw;
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    const X = (r) => nameW + (Math.max(-1, Math.min(1, r)) + 1) / 2 * plotW;
    const nz = S.near_zero || 0;
    if (nz) svg.appendChild(svgEl("rect", { x: X(-nz), y: top - 4, width: X(nz) - X(-nz), height: rows * rowH + 4, fill: "#ececec" }));
    svg.appendChild(svgEl("line", { x1: X(0), x2: X(0), y1: top - 4, y2: top + rows * rowH, stroke: "#000" }));
    const yOf = (k) => top + k * rowH + rowH / 2;
    ms.forEach((m, k) => {
      const y = yOf(k), r = BM.r[i][m], lo = BM.lo[i][m], hi = BM.hi[i][m];
      const g = svgEl("g", { class: "model-row", "data-model": D.models[m] });
      const name = g.appendChild(svgEl("text", { x: nameW - 6, y: y + 4, "text-anchor": "end" }));
      if (BM.runs && BM.runs[i][m].length > 1) BM.runs[i][m].forEach((v, j, a) =>
        g.appendChild(svgEl("circle", { cx: X(v), cy: y - 5 + 10 * j / Math.max(a.length - 1, 1), r: 2, fill: "#999" })));
      if (lo !== null && hi !== null) g.appendChild(svgEl("line", { x1: X(lo), x2: X(hi), y1: y, y2: y, stroke: "#000", "stroke-width": 1.3 }));
      if (r !== null) g.appendChild(svgEl("rect", { x: X(r) - 4, y: y - 4, width: 8, height: 8, fill: "#000" }));
      g.appendChild(svgEl("text", { x: nameW + plotW + 8, y: y + 4 }, r === null ? "n/a" : sgn(r) + (lo !== null ? " [" + sgn(lo) + ", " + sgn(hi) + "]" : "")));
      tasksMark(g, i, m, y, X, nameW + plotW + 8);
      svg.appendChild(g);
      fitLeft(name, D.models[m], nameW - 10);  // measured once drawn
    });
    const base = ms.length, red = "#c0392b";
    svg.appendChild(svgEl("line", { x1: 0, x2: W, y1: top + base * rowH + 2, y2: top + base * rowH + 2, stroke: "#bbb" }));
    const rc = val("r_consensus", i), lo = val("ci_low_consensus", i), hi = val("ci_high_consensus", i);
    let y = yOf(base);
    svg.appendChild(svgEl("text", { x: nameW - 6, y: y + 4, "text-anchor": "end", fill: red }, "consensus of " + fmt(val("n_models_consensus", i), 0) + " models"));
    if (rc !== null && lo !== null && hi !== null)
      svg.appendChild(svgEl("polygon", { class: "consensus", points: [X(lo) + "," + y, X(rc) + "," + (y - 6), X(hi) + "," + y, X(rc) + "," + (y + 6)].join(" "), fill: red }));
    svg.appendChild(svgEl("text", { x: nameW + plotW + 8, y: y + 4, fill: red }, rc === null ? "n/a" : sgn(rc) + " [" + sgn(lo) + ", " + sgn(hi) + "]"));
    more.forEach((row, j) => drawConsensusRow(svg, i, row, yOf(base + 1 + j), X, nameW, plotW));
    const bands = [["pi_low_consensus", "pi_high_consensus", "prediction interval", 4], ["tol_low_consensus", "tol_high_consensus", "tolerance bounds", 1.3]];
    bands.forEach(([a, b, name, w], j) => {
      y = yOf(base + 1 + more.length + j);
      svg.appendChild(svgEl("text", { x: nameW - 6, y: y + 4, "text-anchor": "end", fill: red }, name));
      const l = val(a, i), h = val(b, i);
      if (l !== null && h !== null) svg.appendChild(svgEl("line", { x1: X(l), x2: X(h), y1: y, y2: y, stroke: red, "stroke-width": w, opacity: 0.7 }));
      svg.appendChild(svgEl("text", { x: nameW + plotW + 8, y: y + 4, fill: red }, l === null ? "none" : "[" + sgn(l) + ", " + sgn(h) + "]"));
    });
    const ay = top + rows * rowH + 6;
    for (const t of [-1, -0.5, 0, 0.5, 1]) {
      svg.appendChild(svgEl("line", { x1: X(t), x2: X(t), y1: ay - 3, y2: ay + 2, stroke: "#000" }));
      svg.appendChild(svgEl("text", { x: X(t), y: ay + 14, "text-anchor": "middle" }, String(t)));
    }
    svg.appendChild(svgEl("text", { x: nameW + plotW / 2, y: ay + 30, "text-anchor": "middle" },
      "partial r; squares: each model pooled, lines: " + Math.round(100 * (S.level || 0.95)) + " % intervals" + (nz ? "; grey: ±" + nz : "")));
    if (tw) svg.appendChild(svgEl("text", { x: nameW + plotW / 2, y: ay + 44, "text-anchor": "middle", fill: BLUE },
      "circles: each model's tasks' correlation (item noise out)"));
  }

  // ---- the scores as measurements (agreement.csv's measured columns; absent from older tables) ----
  const BLUE = "#1f77b4";
  function relText(col, i) {  // a reliability: its estimate, else at least its bound's low end
    const v = val(col, i), low = val(col + "_low", i);
    if (typeof v === "number") return v < 0 ? D.noise_exceeds : v > 1 ? "above 1" : v.toFixed(2);
    return typeof low === "number" ? "at least " + Math.max(low, 0).toFixed(2) : null;
  }
  function interval(est, lo, hi) {
    if (lo === null || hi === null || lo === undefined || hi === undefined) return est === null || est === undefined ? "n/a" : sgn(est);
    return (est === null || est === undefined ? "no estimate" : sgn(est)) + " [" + sgn(lo) + ", " + sgn(hi) + "]";
  }
  function measuredLines(i) {  // what the answer is about, each testset's reliability, what leaves it noise-limited
    const out = [], panel = D.panels[R.panel[i]];
    if (val("about", i)) out.push("about the " + val("about", i));
    const rel = [[D.names[R.x[i]], "reliability_x"], [D.names[R.y[i]], "reliability_y"], ["in-domain " + panel.in_domain, "reliability_in_domain"]]
      .map(([name, col]) => [name, relText(col, i)]).filter(([, t]) => t !== null);
    if (rel.length) out.push("reliability " + rel.map(([name, t]) => name + " " + t).join(", "));
    if (val("noise_limited", i)) out.push(D.noise_limited_by + " " + val("noise_limited", i));
    return out;
  }
  function measuredTip(i) {
    if (!V.r_consensus_corrected) return "";
    const tasks = "<br>the tasks' consensus (item noise out) " + esc(interval(val("r_consensus_corrected", i), val("ci_low_consensus_corrected", i), val("ci_high_consensus_corrected", i)));
    const read = typeof val("ci_low_consensus_eiv", i) === "number" ? "<br>in-domain noise out (what the verdict read) " +
      esc(interval(val("r_consensus_eiv", i), val("ci_low_consensus_eiv", i), val("ci_high_consensus_eiv", i))) : "";
    return read + tasks + measuredLines(i).map((l) => "<br>" + esc(l)).join("");
  }
  function modelTasksTip(i, m) {
    if (!hasTasks(i, m)) return "";
    return "its tasks' correlation " + esc(interval(BM.rc[i][m], BM.rc_lo[i][m], BM.rc_hi[i][m])) + "<br>";
  }
  function measuredLegend() {
    const out = [];
    if (D.verdicts.some((v) => v.dotted)) out.push("a pair is noise-limited where a testset's residual series is mostly item noise (its reliability is low): the data cannot say more");
    if (["reliability_x", "reliability_x_low"].some((c) => V[c] && V[c].some((v) => typeof v === "number")))
      out.push("reliability: the share of a testset's residual variance that is not item noise (hover a cell)");
    return out;
  }
  function dottedFrame(ctx, x, y, s) {
    ctx.strokeStyle = "#444"; ctx.lineWidth = 1.2; ctx.setLineDash([1, 2]); ctx.strokeRect(x + 2, y + 2, s - 4, s - 4); ctx.setLineDash([]);
  }
  function tasksMark(g, i, m, y, X, textX) {  // a model's tasks' correlation in the forest plot: a blue circle and line below its square
    if (!hasTasks(i, m)) return;
    const r = BM.rc[i][m], lo = BM.rc_lo[i][m], hi = BM.rc_hi[i][m];
    if (lo !== null && hi !== null) g.appendChild(svgEl("line", { class: "tasks", x1: X(lo), x2: X(hi), y1: y + 6, y2: y + 6, stroke: BLUE, "stroke-width": 0.9 }));
    if (r !== null) g.appendChild(svgEl("circle", { class: "tasks", cx: X(r), cy: y + 6, r: 2.6, fill: "#fff", stroke: BLUE }));
    g.appendChild(svgEl("text", { class: "tasks", x: textX + 135, y: y + 4, fill: BLUE }, interval(r, lo, hi)));
  }
  function hasTasks(i, m) { return Boolean(BM.rc) && (BM.rc[i][m] !== null || BM.rc_lo[i][m] !== null); }
  function tasksWidth(i, ms) { return ms.some((m) => hasTasks(i, m)) ? 150 : 0; }  // the column of the models' tasks' correlations
  function consensusRows(i) {  // the consensus rows below the observed one: what the verdict read, the tasks'
    const out = [];
    if (typeof val("ci_low_consensus_eiv", i) === "number") out.push(["_eiv", "in-domain noise out", "#c0392b"]);
    if (typeof val("ci_low_consensus_corrected", i) === "number" || typeof val("r_consensus_corrected", i) === "number")
      out.push(["_corrected", "the tasks' consensus", BLUE]);
    return out;
  }
  function drawConsensusRow(svg, i, [sfx, name, colour], y, X, nameW, plotW) {
    const r = val("r_consensus" + sfx, i), lo = val("ci_low_consensus" + sfx, i), hi = val("ci_high_consensus" + sfx, i);
    const g = svgEl("g", { class: "consensus-row", "data-row": sfx.slice(1) });
    g.appendChild(svgEl("text", { x: nameW - 6, y: y + 4, "text-anchor": "end", fill: colour }, name));
    if (lo !== null && hi !== null && r !== null)
      g.appendChild(svgEl("polygon", { points: [X(lo) + "," + y, X(r) + "," + (y - 6), X(hi) + "," + y, X(r) + "," + (y + 6)].join(" "), fill: "#fff", stroke: colour }));
    else if (lo !== null && hi !== null)
      g.appendChild(svgEl("rect", { x: X(lo), y: y - 3, width: X(hi) - X(lo), height: 6, fill: "#fff", stroke: colour }));
    const text = r === null && lo !== null && hi !== null ? "[" + sgn(lo) + ", " + sgn(hi) + "]" : interval(r, lo, hi);  // the hover says "no estimate"
    g.appendChild(svgEl("text", { x: nameW + plotW + 8, y: y + 4, fill: colour }, text));
    svg.appendChild(g);
  }

  // ---- the table of the pairs shown ----
  const TABLE_COLS = ["r_consensus", "ci_low_consensus", "ci_high_consensus", "pi_low_consensus", "pi_high_consensus",
                      "tol_low_consensus", "tol_high_consensus", "n_models", "n_positive", "n_negative"];
  const MEASURED_COLS = ["r_consensus_corrected", "ci_low_consensus_corrected", "ci_high_consensus_corrected", "reliability_x", "reliability_y"];
  const MAX_TABLE = 400;
  function tableCols() { return TABLE_COLS.concat(MEASURED_COLS).filter((c) => V[c]).concat(D.numeric.filter((c) => !TABLE_COLS.includes(c) && c.startsWith("p_") && c.endsWith("_adj"))); }
  function sortKey(i, col) {
    if (col === "x") return D.names[R.x[i]]; if (col === "y") return D.names[R.y[i]];
    if (col === "verdict") return D.verdicts[R.verdict[i]].name;
    return V[col][i];
  }
  function drawTable(vis) {
    const cols = ["x", "y", "verdict"].concat(tableCols());
    const { col, dir } = state.sort;
    const rows = vis.slice();
    if (col) rows.sort((a, b) => {
      const p = sortKey(a, col), q = sortKey(b, col);
      if (p === q) return 0; if (p === null) return 1; if (q === null) return -1;
      return (p < q ? -1 : 1) * dir;
    });
    $("table").tHead.innerHTML = "<tr>" + cols.map((c) => "<th data-col=\"" + c + "\">" + esc(c) + (c === col ? (dir > 0 ? " ▲" : " ▼") : "") + "</th>").join("") + "</tr>";
    const html = [];
    for (const i of rows.slice(0, MAX_TABLE)) {
      html.push("<tr data-row=\"" + i + "\"><td>" + esc(D.names[R.x[i]]) + "</td><td>" + esc(D.names[R.y[i]]) + "</td><td>" +
        esc(D.verdicts[R.verdict[i]].name) + "</td>" + tableCols().map((c) => "<td>" + fmt(V[c][i], c.startsWith("n_") ? 0 : 3) + "</td>").join("") + "</tr>");
    }
    $("table").tBodies[0].innerHTML = html.join("");
    $("table-count").textContent = "(" + rows.length + ")";
    $("table-more").textContent = rows.length > MAX_TABLE ? "The first " + MAX_TABLE + " of " + rows.length + " are listed: sort, filter or download the pairs shown for all of them." : "";
  }

  // ---- downloads: from the page itself (a blob), nothing fetched ----
  function download(name, text) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    a.download = name; document.body.appendChild(a); a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  }
  function csvCell(v) { const s = v === null || v === undefined ? "" : String(v); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }
  function visibleCsv() {
    const cols = ["x", "y", "verdict"].concat(D.columns);
    const lines = [cols.join(",")];
    for (const i of visibleRows()) lines.push([D.names[R.x[i]], D.names[R.y[i]], D.verdicts[R.verdict[i]].name].concat(D.columns.map((c) => V[c][i])).map(csvCell).join(","));
    return lines.join("\n") + "\n";
  }

  // ---- set-up ----
  function setup() {
    $("title").textContent = D.title;
    $("answer").innerHTML = D.answer.map((l) => "<li>" + esc(l) + "</li>").join("");
    $("settings").textContent = [S.input ? "input " + S.input : "", S.level ? "intervals " + Math.round(100 * S.level) + " %" : "",
      S.correction ? "cells corrected across pairs: " + S.correction : "", S.agreement_correction ? "the answer's statements: " + S.agreement_correction : "",
      S.alpha ? "alpha " + S.alpha : "", S.near_zero ? "near zero: ±" + S.near_zero : ""].filter(Boolean).join("; ");
    $("panel").innerHTML = D.panels.map((p, k) => "<option value=\"" + k + "\">" + esc(p.in_domain + (p.pool_group !== "all runs" ? " (" + p.pool_group + ")" : "") + ": " + p.method + ", " + p.residualiser) + "</option>").join("");
    $("panel").value = String(state.panel);
    if (D.panels.length < 2) $("panel-label").hidden = true;
    $("view").innerHTML = "<option value=\"-1\">consensus across models</option>" + D.models.map((m, k) => "<option value=\"" + k + "\">model " + esc(m) + "</option>").join("");
    const order = D.verdicts.map((v, k) => k).sort((a, b) => D.verdicts[a].rank - D.verdicts[b].rank);
    $("verdicts").insertAdjacentHTML("beforeend", order.map((k) => "<label><input type=\"checkbox\" checked data-verdict=\"" + k + "\"><span class=\"swatch\" style=\"background:" +
      D.verdicts[k].colour + "\"></span>" + esc(D.verdicts[k].name) + " (<span data-count=\"" + k + "\">0</span>)</label>").join(""));
    $("verdicts").addEventListener("change", (e) => {
      const k = Number(e.target.dataset.verdict);
      if (e.target.checked) state.hidden.delete(k); else state.hidden.add(k);
      draw();
    });
    $("panel").addEventListener("change", (e) => { state.panel = Number(e.target.value); state.selected = -1; draw(); });
    $("view").addEventListener("change", (e) => { state.view = Number(e.target.value); draw(); });
    $("order").addEventListener("change", (e) => { state.order = e.target.value; draw(); });
    $("names").addEventListener("input", (e) => { state.names = e.target.value; draw(); });
    $("match").addEventListener("change", (e) => { state.match = e.target.value; draw(); });
    $("heat").addEventListener("mousemove", onMove);
    $("heat").addEventListener("mouseleave", () => { $("tip").hidden = true; });
    $("heat").addEventListener("click", (ev) => { const i = cellAt(ev); if (i >= 0) select(i); });
    $("table").addEventListener("click", (ev) => {
      const th = ev.target.closest("th"), tr = ev.target.closest("tr[data-row]");
      if (th) { const c = th.dataset.col; state.sort = { col: c, dir: state.sort.col === c ? -state.sort.dir : (c.startsWith("p_") || c === "x" || c === "y" || c === "verdict" ? 1 : -1) }; draw(); }
      else if (tr) select(Number(tr.dataset.row));
    });
    $("download-csv").addEventListener("click", () => download("agreement.csv", D.csv));
    $("download-visible").addEventListener("click", () => download("agreement-shown.csv", visibleCsv()));
    window.addEventListener("resize", () => draw());
    draw();
  }
  // for the page's tests and for scripting: where a pair's cell is drawn, and what is shown
  window.oodcorrExplorer = {
    cellCentre(x, y) {
      for (const [key, i] of layout.cell) {
        const a = D.names[R.x[i]], b = D.names[R.y[i]];
        if ((a === x && b === y) || (a === y && b === x)) {
          const rect = $("heat").getBoundingClientRect(), row = Math.floor(key / 100000), col = key % 100000;
          return { x: rect.left + layout.left + (col + 0.5) * layout.s, y: rect.top + layout.top + (row + 0.5) * layout.s, s: layout.s };
        }
      }
      return null;
    },
    shown() { return layout.cell.size; },
  };
  setup();
  window.oodcorrExplorer.drawnMs = performance.now(); // from navigation start to the heatmap drawn
  document.body.dataset.ready = "1";
})();
