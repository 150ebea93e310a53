// The page's script. Every table gets CSV and JSON downloads made from its own cells (data: URLs, no
// server). The denoising path: a prompt and a batch-size selector choose what the answers, canvas grids and
// spread figures show; one slider (and play/pause) moves every shown canvas grid together.
// Data: the JSON block #canvas-data, one dataset per prompt of each batch-study folder (see canvas_grid.py).
"use strict";
(function () {
  function cellsOf(table) {
    return [...table.rows].map((row) => [...row.cells].map((cell) => cell.textContent.trim()));
  }

  function csv(rows) {
    const quote = (v) => (/[",\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v);
    return rows.map((row) => row.map(quote).join(",")).join("\n") + "\n";
  }

  function asJson(rows) {
    const [head, ...body] = rows;
    return JSON.stringify(body.map((row) => Object.fromEntries(head.map((h, i) => [h || "column " + (i + 1), row[i]]))), null, 1);
  }

  function link(text, type, name, content) {
    const a = document.createElement("a");
    a.textContent = text;
    a.download = name;
    a.href = "data:" + type + ";charset=utf-8," + encodeURIComponent(content);
    return a;
  }

  function tableName(table, index) {
    let heading = table.closest(".scroll, .scroll-x, details") || table;
    while (heading && !/^H[2-5]$/.test(heading.tagName)) heading = heading.previousElementSibling;
    const words = (heading ? heading.textContent : "table") + " " + (index + 1);
    return words.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
  }

  document.querySelectorAll("table.data").forEach((table, index) => {
    const rows = cellsOf(table);
    const name = tableName(table, index);
    const bar = document.createElement("p");
    bar.className = "downloads";
    bar.append("download: ", link("CSV", "text/csv", name + ".csv", csv(rows)), " · ",
      link("JSON", "application/json", name + ".json", asJson(rows)));
    (table.closest(".scroll, .scroll-x") || table).after(bar);
  });

  const PAGE = 8;
  const STATE_NAMES = { "0": "noise", "1": "committed", "2": "differs from B=1" };
  const datasets = JSON.parse(document.getElementById("canvas-data").textContent || "[]");
  const slider = document.getElementById("pass-slider");
  if (!slider || datasets.length === 0) return;
  const label = document.getElementById("pass-label");
  const play = document.getElementById("play");
  const tip = document.getElementById("tip");
  const promptSelect = document.getElementById("prompt-select");
  const batchSelect = document.getElementById("batch-select");

  // The selectors: every prompt of any folder, and every batch size; the first shown prompt is preselected.
  const blocks = [...document.querySelectorAll(".per-prompt")];
  const prompts = [...new Set(blocks.map((b) => b.dataset.prompt))];
  const first = blocks.find((b) => !b.hidden);
  for (const prompt of prompts) promptSelect.add(new Option(prompt, prompt, false, first && first.dataset.prompt === prompt));
  const sizes = [...new Set(datasets.flatMap((d) => d.sizes.map((s) => s.B)))].sort((a, b) => a - b).filter((b) => b !== 1);
  for (const b of sizes) batchSelect.add(new Option("B=" + b + " beside B=1", String(b)));

  function applySelection() {
    const prompt = promptSelect.value, batch = batchSelect.value;
    for (const block of blocks) block.hidden = block.dataset.prompt !== prompt;
    rebuildTimeline(prompt);
    document.querySelectorAll(".per-prompt [data-batch]").forEach((el) => {
      el.hidden = batch !== "" && el.dataset.batch !== batch && el.dataset.batch !== "1";
    });
    document.querySelectorAll(".per-prompt table.data tbody tr").forEach((row) => {
      const b = row.cells[0].textContent.split(" ")[0];
      row.hidden = batch !== "" && b !== batch && b !== "1";
    });
    update();
  }

  // The shared timeline: every (canvas, pass) any batch size of the selected prompt reached, in any folder.
  let timeline = [];
  function rebuildTimeline(prompt) {
    const seen = new Map();
    for (const d of datasets) if (d.prompt === prompt) for (const size of d.sizes) for (const p of size.passes) seen.set(p.c * 100000 + p.s, [p.c, p.s]);
    const atEnd = timeline.length === 0 || Number(slider.value) === timeline.length - 1;
    timeline = [...seen.keys()].sort((a, b) => a - b).map((k) => seen.get(k));
    if (timeline.length === 0) timeline = [[0, 0]];
    slider.max = String(timeline.length - 1);
    if (atEnd || Number(slider.value) > timeline.length - 1) slider.value = String(timeline.length - 1);
  }
  const grids = [];

  function passFor(size, point) {
    // The last pass of this size at or before (canvas, step); past its stop it keeps its final canvas.
    let chosen = null;
    for (const p of size.passes) if (p.c < point[0] || (p.c === point[0] && p.s <= point[1])) chosen = p;
    return chosen || size.passes[0];
  }

  function token(dataset, size, p, i) {
    if (Array.isArray(p.tok)) return p.tok[i];
    if (p.tok && p.tok[i] !== undefined) return p.tok[i];
    const base = dataset.sizes[0].passes[p.ref];
    return base ? base.tok[i] : undefined;
  }

  function entropy(dataset, p, i) {
    if (Array.isArray(p.ent)) return p.ent[i];
    if (p.ent && p.ent[i] !== undefined) return p.ent[i];
    const base = p.ref === null ? null : dataset.sizes[0].passes[p.ref];
    return base && base.ent ? base.ent[i] : undefined;
  }

  function buildGrid(dataset, size) {
    const box = document.createElement("div");
    box.className = "grid-box";
    box.dataset.batch = String(size.B);
    const side = Math.ceil(Math.sqrt(dataset.width));
    const stops = size.stops.map((s, c) => (s === null ? "canvas " + c + ": budget used up" : "canvas " + c + ": stopped at pass " + s));
    box.innerHTML = "<h5>B=" + size.B + (size.B === 1 ? " (reference)" : "") + "</h5><p class=\"status\"></p>";
    const cells = document.createElement("div");
    cells.className = "cells";
    cells.style.gridTemplateColumns = "repeat(" + side + ", 1fr)";
    cells.setAttribute("role", "img");
    for (let i = 0; i < dataset.width; i++) {
      const cell = document.createElement("span");
      cell.dataset.pos = String(i);
      cells.appendChild(cell);
    }
    box.appendChild(cells);
    const grid = { dataset, size, box, cells, status: box.querySelector(".status"), stops: stops.join("; "), pass: null };
    cells.addEventListener("mousemove", (event) => showTip(grid, event));
    cells.addEventListener("mouseleave", () => { tip.style.display = "none"; });
    return grid;
  }

  function describe(grid, i) {
    const p = grid.pass;
    const t = token(grid.dataset, grid.size, p, i);
    const text = t === undefined ? "?" : (grid.dataset.text[String(t)] !== undefined ? grid.dataset.text[String(t)] : "#" + t);
    const e = entropy(grid.dataset, p, i);
    return "B=" + grid.size.B + " · position " + i + "\n" + STATE_NAMES[p.state[i]] + ": " + JSON.stringify(text) + " (id " + t + ")" +
      (e === undefined ? "" : "\nentropy " + (e / 100).toFixed(2) + " nats");
  }

  function showTip(grid, event) {
    const pos = event.target.dataset.pos;
    if (pos === undefined || !grid.pass) return;
    tip.textContent = describe(grid, Number(pos));
    tip.style.display = "block";
    tip.style.left = Math.min(event.clientX + 12, window.innerWidth - 260) + "px";
    tip.style.top = (event.clientY + 14) + "px";
  }

  function paint(grid, point) {
    const p = passFor(grid.size, point);
    grid.pass = p;
    const children = grid.cells.children;
    let committed = 0, differs = 0;
    for (let i = 0; i < children.length; i++) {
      const s = p.state[i];
      children[i].className = "s" + s;
      if (s === "1") committed++;
      else if (s === "2") differs++;
    }
    const stopped = p.c !== point[0] || p.s !== point[1];
    grid.box.classList.toggle("stopped", stopped);
    grid.box.dataset.shownPass = p.c + ":" + p.s;
    grid.status.textContent = "showing canvas " + p.c + " pass " + (p.s + 1) + " · committed " + committed +
      " · differs " + differs + "\n" + grid.stops;
    grid.cells.setAttribute("aria-label", "B=" + grid.size.B + ": " + committed + " committed, " + differs +
      " differ from B=1, " + (children.length - committed - differs) + " noise");
  }

  function update() {
    if (timeline.length === 0) return;
    const point = timeline[Number(slider.value)];
    const text = "denoising pass " + (Number(slider.value) + 1) + " of " + timeline.length + " (canvas " + point[0] + ", pass " + (point[1] + 1) + ")";
    label.textContent = text;
    slider.setAttribute("aria-valuetext", text);
    for (const grid of grids) if (grid.box.isConnected && !grid.box.hidden) paint(grid, point);
  }

  function showPage(dataset, container, pager, page) {
    container.querySelectorAll(".grid-box").forEach((box) => box.remove());
    const first = page * PAGE;
    for (const grid of grids.filter((g) => g.dataset === dataset).slice(first, first + PAGE)) container.appendChild(grid.box);
    pager.querySelectorAll("button").forEach((b, i) => b.setAttribute("aria-pressed", String(i === page)));
    update();
  }

  for (const dataset of datasets) {
    const container = document.querySelector('.grids[data-dataset="' + dataset.key + '"]');
    if (!container) continue;
    for (const size of dataset.sizes) grids.push(buildGrid(dataset, size));
    const pager = document.createElement("div");
    pager.className = "pager";
    const pages = Math.ceil(dataset.sizes.length / PAGE);
    if (pages > 1) {
      for (let page = 0; page < pages; page++) {
        const button = document.createElement("button");
        const sizes = dataset.sizes.slice(page * PAGE, page * PAGE + PAGE).map((s) => s.B);
        button.type = "button";
        button.textContent = "B " + sizes[0] + "–" + sizes[sizes.length - 1];
        button.addEventListener("click", () => showPage(dataset, container, pager, page));
        pager.appendChild(button);
      }
      container.before(pager);
    }
    showPage(dataset, container, pager, 0);
  }

  let timer = null;
  function setPlaying(on) {
    if (timer) { clearInterval(timer); timer = null; }
    if (on) {
      timer = setInterval(() => {
        slider.value = String((Number(slider.value) + 1) % timeline.length);
        update();
      }, 700);
    }
    play.setAttribute("aria-pressed", String(on));
    play.textContent = on ? "❚❚ pause" : "▶ play";
  }
  play.addEventListener("click", () => setPlaying(!timer));
  promptSelect.addEventListener("change", applySelection);
  batchSelect.addEventListener("change", applySelection);
  slider.addEventListener("input", () => { setPlaying(false); update(); });
  applySelection();
})();
