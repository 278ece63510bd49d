// The trace page's script: reads the trace's JSON from #trace-data and draws it. No dependencies, no requests.
"use strict";
(function () {
  const trace = JSON.parse(document.getElementById("trace-data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  };
  const ms = (seconds) => (seconds === null || seconds === undefined ? "—" : (seconds * 1000).toFixed(1) + " ms");
  const CHANNELS = ["analysis", "final", "commentary"];
  const channelClass = (ch) => (ch ? "ch-" + (CHANNELS.includes(ch) ? ch : "other") : "");
  const isSpecial = (text) => /^<\|[a-z_]+\|>$/.test(text);
  const shown = (text) => text.replace(/\n/g, "↵\n");

  const tokens = trace.tokens || [];
  const events = trace.events || [];
  const recoveries = trace.recoveries || [];
  const tools = trace.tools || [];
  const calls = trace.engine_calls || [];
  const tokenNodes = new Map(); // token index → span
  const eventNodes = new Map(); // sequence number → li
  const eventsOf = new Map(); // token index → sequence numbers
  const recovered = new Set();
  recoveries.forEach((r) => r.tokens.forEach((i) => recovered.add(i)));

  // ------------------------------------------------------------------ summary and timing
  // A compaction's summary call (purpose "compaction") is not the answer's: its tokens are listed with it.
  const compactions = calls.filter((c) => c.purpose === "compaction");
  const first = calls.find((c) => c.purpose !== "compaction") || null;
  const ttft = first && first.first_token !== null ? first.first_token - first.sent : null;
  const toolTime = tools.reduce((sum, t) => sum + (t.duration || 0), 0);
  const last = calls.length ? calls[calls.length - 1].ended : null;
  $("summary").textContent =
    `${trace.model} · ${trace.prompt.count} prompt tokens · ${tokens.length} output tokens · ` +
    `${calls.length} engine call(s) · ${events.length} events · ${tools.length} tool call(s) · ` +
    `${recoveries.length} recovery(ies)`;
  $("truncated").hidden = !trace.truncated;

  const gaps = [];
  for (let k = 1; k < tokens.length; k++) {
    if (tokens[k].call === tokens[k - 1].call) gaps.push(tokens[k].t - tokens[k - 1].t);
  }
  const maxGap = gaps.length ? Math.max(...gaps) : null;
  const meanGap = gaps.length ? gaps.reduce((a, b) => a + b, 0) / gaps.length : null;
  $("timing-figures").textContent =
    `time to first token ${ms(ttft)} · mean gap ${ms(meanGap)} · longest gap ${ms(maxGap)} · ` +
    `tool time ${ms(toolTime)} · engine done at ${ms(last)}`;
  drawTiming();

  function drawTiming() {
    const W = 1000, H = 160, P = 30;
    const end = Math.max(last || 0, ...calls.map((c) => c.ended || 0), ...tokens.map((t) => t.t), ...tools.map((t) => t.ended || 0), 1e-6);
    const n = Math.max(tokens.length, 1);
    const x = (i) => P + ((W - 2 * P) * i) / n;
    const y = (t) => H - P - ((H - 2 * P) * t) / end;
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("width", "100%");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "arrival time of each output token");
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text) node.textContent = text;
      svg.appendChild(node);
      return node;
    };
    compactions.forEach((c) => {
      const ended = c.ended || c.sent;
      add("rect", { class: "toolband compactionband", x: P, width: W - 2 * P, y: y(ended), height: Math.max(1, y(c.sent) - y(ended)) });
      add("text", { x: W - P - 4, y: y(ended) + 10, "text-anchor": "end" }, `compaction summary ${ms(ended - c.sent)}`);
    });
    tools.forEach((t) => {
      add("rect", { class: "toolband", x: P, width: W - 2 * P, y: y(t.ended), height: Math.max(1, y(t.started) - y(t.ended)) });
      add("text", { x: W - P - 4, y: y(t.ended) + 10, "text-anchor": "end" }, `${t.name} ${ms(t.duration)}`);
    });
    const gapScale = maxGap ? (H - 2 * P) / 2 / maxGap : 0;
    let path = "";
    tokens.forEach((t, k) => {
      path += (k ? "L" : "M") + x(k).toFixed(1) + "," + y(t.t).toFixed(1);
      if (k && tokens[k - 1].call === t.call && gapScale) {
        const h = (t.t - tokens[k - 1].t) * gapScale;
        if (h > 0.5) add("rect", { class: "gap", x: x(k), y: H - P - h, width: Math.max(1, x(1) - x(0)), height: h });
      }
    });
    if (path) add("path", { class: "arrival", d: path });
    if (ttft !== null) add("line", { class: "ttft", x1: P, x2: W - P, y1: y(first.first_token), y2: y(first.first_token) });
    add("text", { x: P, y: H - 8 }, "token 0");
    add("text", { x: W - P, y: H - 8, "text-anchor": "end" }, `token ${tokens.length}`);
    add("text", { x: 2, y: P }, ms(end));
    add("text", { x: 2, y: H - P }, "0");
    $("timing").appendChild(svg);
  }

  // ------------------------------------------------------------------ output tokens
  const legend = $("legend");
  [["analysis", "analysis"], ["final", "final"], ["commentary", "commentary"], ["other", "other channel"],
    ["header", "header / between messages"]].forEach(([cls, label]) => {
    const span = el("span", { class: "tok " + (cls === "header" ? "st-HEADER" : "ch-" + cls) }, label);
    legend.appendChild(span);
  });
  const itemHue = new Map();
  const hue = (item) => {
    if (!itemHue.has(item)) itemHue.set(item, (itemHue.size * 67) % 360);
    return itemHue.get(item);
  };
  const box = $("tokens");
  let callShown = -1;
  const toolsByItem = new Map(tools.map((t) => [t.item, t]));
  tokens.forEach((t) => {
    const group = t.prefill ? "prefill" : t.call;
    if (group !== callShown) {
      callShown = group;
      box.appendChild(el("span", { class: "marker" }, t.prefill ? "prefilled by the prompt" : `engine call ${t.call + 1}`));
    }
    const cls = ["tok", channelClass(t.channel), "st-" + t.state];
    if (t.prefill) cls.push("prefill");
    if (isSpecial(t.text)) cls.push("special");
    if (t.events.length) cls.push("caused");
    if (recovered.has(t.i)) cls.push("recovered");
    const span = el("span", { class: cls.join(" "), "data-i": String(t.i), title: `#${t.i} id ${t.id}` }, shown(t.text));
    if (t.item) span.style.borderBottomColor = `hsl(${hue(t.item)} 70% 45%)`;
    span.addEventListener("click", () => selectToken(t.i));
    tokenNodes.set(t.i, span);
    eventsOf.set(t.i, t.events);
    box.appendChild(span);
    const tool = t.state === "AWAIT_TOOL" && toolsByItem.get(t.item);
    if (tool) box.appendChild(el("span", { class: "marker tool" }, `⚙ ${tool.namespace ? tool.namespace + "." : ""}${tool.name} ${ms(tool.duration)}`));
  });

  // ------------------------------------------------------------------ events
  const summaryOf = (e) => {
    if (typeof e.delta === "string") return JSON.stringify(e.delta);
    if (e.item) return `${e.item.type} ${e.item.id || ""}`;
    if (e.response) return `status ${e.response.status}`;
    if (e.message) return e.message;
    return e.item_id || "";
  };
  const list = $("events");
  events.forEach((entry) => {
    const e = entry.event;
    const li = el("li", { class: "ev", value: String(entry.seq), "data-seq": String(entry.seq) });
    li.appendChild(el("span", { class: "seq" }, String(entry.seq)));
    li.appendChild(document.createTextNode(e.type + " "));
    li.appendChild(el("span", { class: "at" }, (entry.token !== null ? `← token #${entry.token} ` : "") + summaryOf(e)));
    li.addEventListener("click", () => selectEvent(entry));
    eventNodes.set(entry.seq, li);
    list.appendChild(li);
  });

  // ------------------------------------------------------------------ selection
  function clear() {
    document.querySelectorAll(".selected, .related").forEach((n) => n.classList.remove("selected", "related"));
  }
  function detail(rows, extra) {
    const d = $("detail");
    d.replaceChildren();
    const table = el("table");
    rows.forEach(([k, v]) => {
      const tr = el("tr");
      tr.appendChild(el("td", {}, k));
      tr.appendChild(el("td", {}, v === null || v === undefined ? "—" : String(v)));
      table.appendChild(tr);
    });
    d.appendChild(table);
    if (extra) d.appendChild(el("pre", {}, extra));
  }
  function selectToken(i) {
    clear();
    const t = tokens.find((x) => x.i === i);
    const node = tokenNodes.get(i);
    if (node) node.classList.add("selected");
    const seqs = eventsOf.get(i) || [];
    seqs.forEach((s) => eventNodes.get(s) && eventNodes.get(s).classList.add("selected"));
    if (seqs.length && eventNodes.get(seqs[0])) eventNodes.get(seqs[0]).scrollIntoView({ block: "nearest" });
    const rec = recoveries.filter((r) => r.tokens.includes(i));
    detail([
      ["token", `#${t.i} (id ${t.id})`], ["text", JSON.stringify(t.text)], ["logprob", t.logprob],
      ["arrived", t.prefill ? "prefilled by the prompt" : ms(t.t)], ["engine call", t.call + 1],
      ["chunk", t.prefill ? null : t.chunk], ["state after", t.state],
      ["header read", t.header], ["channel", t.channel], ["item", t.item],
      ["events", seqs.length ? seqs.map((s) => `${s} ${eventType(s)}`).join(", ") : "none"],
      ["recovery", rec.map((r) => r.rule).join(", ") || null],
    ]);
  }
  function eventType(seq) {
    const entry = events.find((e) => e.seq === seq);
    return entry ? entry.event.type : "";
  }
  function selectEvent(entry) {
    clear();
    eventNodes.get(entry.seq).classList.add("selected");
    const itemId = entry.event.item_id || (entry.event.item && entry.event.item.id);
    if (itemId) tokens.filter((t) => t.item === itemId).forEach((t) => tokenNodes.get(t.i).classList.add("related"));
    const node = entry.token !== null ? tokenNodes.get(entry.token) : null;
    if (node) {
      node.classList.add("selected");
      node.scrollIntoView({ block: "nearest" });
    }
    detail([["event", `${entry.seq} ${entry.event.type}`], ["caused by token", entry.token === null ? "none (lifecycle, tool result or end)" : "#" + entry.token], ["sent at", ms(entry.t)]],
      JSON.stringify(entry.event, null, 2));
  }

  // ------------------------------------------------------------------ recoveries, tools, engine calls, prompt
  recoveries.forEach((r) => {
    const li = el("li", { class: "recovery" }, `${r.rule}: ${r.detail} (tokens ${r.tokens.length ? r.tokens[0] + "–" + r.tokens[r.tokens.length - 1] : "none"})`);
    li.addEventListener("click", () => {
      clear();
      r.tokens.forEach((i) => tokenNodes.get(i) && tokenNodes.get(i).classList.add("selected"));
      detail([["rule", r.rule], ["detail", r.detail], ["tokens", r.tokens.join(", ")]]);
    });
    $("recoveries").appendChild(li);
  });
  if (!recoveries.length) $("recoveries").appendChild(el("li", { class: "hint" }, "none: the model's Harmony was well formed"));
  tools.forEach((t) => {
    const li = el("li", {}, `${t.namespace ? t.namespace + "." : ""}${t.name} in ${ms(t.duration)}${t.error ? " — failed: " + t.error : ""}`);
    li.appendChild(el("pre", {}, "input: " + t.input + "\noutput: " + (t.output || "")));
    $("tools").appendChild(li);
  });
  calls.forEach((c) => {
    const li = el("li", { class: c.purpose === "compaction" ? "compaction" : "" }, `${c.purpose === "compaction" ? "compaction summary · " : ""}${c.request.prompt_tokens} prompt tokens · admitted ${ms(c.admitted)} · first token ${ms(c.first_token)} · ended ${ms(c.ended)} (${c.finish || "—"}) · ${c.tokens} tokens in ${c.chunks} chunks`);
    const d = el("details");
    d.appendChild(el("summary", {}, "request body"));
    d.appendChild(el("pre", {}, JSON.stringify(c.body || c.request, null, 2)));
    li.appendChild(d);
    if (c.purpose === "compaction") {
      // Its own prompt and the summary it generated, apart from the answer's timeline.
      const g = el("details", { class: "compaction-tokens" });
      g.appendChild(el("summary", {}, `summary tokens (${(c.generated || []).length}), prompt (${c.prompt ? c.prompt.count : 0} tokens)`));
      const strip = el("div", { class: "tokens" });
      (c.generated || []).forEach((t) => {
        const cls = ["tok", channelClass(t.channel), "st-" + t.state];
        if (t.prefill) cls.push("prefill");
        if (isSpecial(t.text)) cls.push("special");
        strip.appendChild(el("span", { class: cls.join(" "), title: `#${t.i} id ${t.id} at ${ms(t.t)}` }, shown(t.text)));
      });
      g.appendChild(strip);
      const p = el("div", { class: "tokens" });
      ((c.prompt && c.prompt.tokens) || []).forEach(([id, text], k) => {
        p.appendChild(el("span", { class: "tok" + (isSpecial(text) ? " special" : "") + (k % 2 ? " odd" : ""), title: `#${k} id ${id}` }, shown(text)));
      });
      g.appendChild(p);
      li.appendChild(g);
    }
    $("engine-calls").appendChild(li);
  });
  $("messages-json").textContent = JSON.stringify(trace.prompt.messages, null, 2);
  const prompt = $("prompt");
  (trace.prompt.tokens || []).forEach(([id, text], k) => {
    prompt.appendChild(el("span", { class: "tok" + (isSpecial(text) ? " special" : "") + (k % 2 ? " odd" : ""), title: `#${k} id ${id}` }, shown(text)));
  });
})();
