// Agora dashboard: reads /dashboard/events (server-sent events, one snapshot a second) and
// renders it. Everything shown comes from the node or its peers, so text is only ever set with
// textContent / attributes, never parsed as HTML.
"use strict";

const HISTORY = 300; // samples kept for the charts (5 minutes at one a second)
const SMOOTH = 5; // samples each chart point averages over
const COLORS = ["#4fb3ff", "#5ad17a", "#ffb347", "#ff6b6b", "#c792ea", "#7fdbca", "#f78c6c", "#ffd866", "#a0a8b0"];
let key = sessionStorage.getItem("agora-key") || "";
let seq = 0;
let history = [];
let lastSnapshot = null;
let selectedTopic = "";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function replace(parent, children) {
  parent.replaceChildren(...children);
}

function short(id) {
  id = String(id || "");
  return id.length > 16 ? id.slice(0, 8) + "…" + id.slice(-6) : id;
}

function duration(secs) {
  secs = Math.max(0, Math.floor(secs));
  const d = Math.floor(secs / 86400), h = Math.floor(secs / 3600) % 24, m = Math.floor(secs / 60) % 60, s = secs % 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
}

function headers() {
  return key ? { Authorization: "Bearer " + key } : {};
}

function kv(dl, pairs) {
  const items = [];
  for (const [k, v] of pairs) {
    items.push(el("dt", {}, k), el("dd", {}, v === undefined || v === null ? "–" : typeof v === "object" ? JSON.stringify(v) : v));
  }
  replace(dl, items);
}

function renderNode(s) {
  const st = s.status || {};
  $("node-peer-id").textContent = st.peer_id || "?";
  $("node-version").textContent = "v" + (s.node && s.node.version || "?");
  $("node-uptime").textContent = duration(st.uptime_secs || 0);
  $("node-data-dir").textContent = s.node && s.node.data_dir || "?";
  $("node-embedder").textContent = st.memory && st.memory.embedder || "–";
  const faces = Object.entries(st.faces || {}).map(([f, a]) => el("span", { "data-face": f }, f + " " + a));
  replace($("node-faces"), faces);
}

function renderNeighbourhood(s) {
  const st = s.status || {};
  const connected = st.connected || [];
  const meshPeers = st.mesh_peers || {};
  const topics = Object.keys(meshPeers).sort();
  $("peer-count").textContent = connected.length;
  $("kad-peers").textContent = st.kad_peers || 0;
  $("topic-count").textContent = (st.topics || []).length;
  const select = $("topic-select");
  if (select.options.length !== topics.length + 1 || [...select.options].slice(1).some((o, i) => o.value !== topics[i])) {
    replace(select, [el("option", { value: "" }, "(any joined topic)"), ...topics.map((t) => {
      const o = el("option", { value: t }, t);
      return o;
    })]);
    select.value = topics.includes(selectedTopic) ? selectedTopic : "";
  }
  const inMesh = new Set();
  for (const [t, peers] of Object.entries(meshPeers)) {
    if (!selectedTopic || t === selectedTopic) for (const p of peers) inMesh.add(p);
  }
  const neighbours = new Set(st.gossip && st.gossip.neighbours || []);
  const scores = st.gossip && st.gossip.scores || {};
  replace($("peers"), connected.map((p) => el("li", { "data-peer": p },
    el("code", {}, p),
    inMesh.has(p) ? el("span", { class: "tag remote" }, "mesh") : null,
    neighbours.has(p) ? el("span", { class: "tag" }, "neighbour") : null,
    scores[p] !== undefined ? el("span", { class: "tag" }, "score " + scores[p]) : null)));
  // the graph: this node in the centre, its peers around it, mesh links highlighted
  const g = $("peer-graph");
  const items = [];
  const n = connected.length;
  const r = 150;
  connected.forEach((p, i) => {
    const a = (2 * Math.PI * i) / Math.max(n, 1) - Math.PI / 2;
    const x = r * Math.cos(a), y = r * Math.sin(a);
    items.push(svg("line", { x1: 0, y1: 0, x2: x, y2: y, class: inMesh.has(p) ? "edge mesh" : "edge" }));
  });
  connected.forEach((p, i) => {
    const a = (2 * Math.PI * i) / Math.max(n, 1) - Math.PI / 2;
    const x = r * Math.cos(a), y = r * Math.sin(a);
    const c = svg("circle", { cx: x, cy: y, r: 10, class: "peer" });
    const title = svg("title", {});
    title.textContent = p;
    c.append(title);
    items.push(c);
    const t = svg("text", { x: x, y: y + 22 });
    t.textContent = short(p);
    items.push(t);
  });
  items.push(svg("circle", { cx: 0, cy: 0, r: 14, class: "self" }));
  const me = svg("text", { x: 0, y: 30 });
  me.textContent = "this node";
  items.push(me);
  replace(g, items);
  const events = (s.events || []).slice().reverse().slice(0, 30);
  replace($("conn-events"), events.map((e) => el("li", {},
    new Date(e.at_ms).toLocaleTimeString() + " ",
    el("span", { class: e.kind === "connected" ? "good" : "bad" }, e.kind), " ",
    el("code", {}, short(e.peer)))));
}

function sample(s) {
  const t = s.traffic || {};
  history.push({ ms: t.uptime_ms || 0, faces: t.faces || {}, gossip: t.gossip || {} });
  if (history.length > HISTORY + 1) history.shift();
}

function rates(kind) {
  const names = new Set();
  for (const h of history) for (const k of Object.keys(h[kind])) names.add(k);
  const series = {};
  for (const name of names) {
    series[name] = [];
    // Each point averages the last few seconds, so a count that ticks in alternate seconds
    // does not draw as a comb.
    for (let i = 1; i < history.length; i++) {
      const j = Math.max(0, i - SMOOTH);
      const dt = (history[i].ms - history[j].ms) / 1000;
      const dv = (history[i][kind][name] || 0) - (history[j][kind][name] || 0);
      series[name].push(dt > 0 ? Math.max(0, dv / dt) : 0);
    }
  }
  return series;
}

function chart(canvasId, legendId, series) {
  const c = $(canvasId);
  const ctx = c.getContext("2d");
  const w = c.width, h = c.height, pad = 24;
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const v of Object.values(series)) for (const x of v) max = Math.max(max, x);
  ctx.strokeStyle = "#26303a";
  ctx.fillStyle = "#7d8894";
  ctx.font = "10px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + ((h - pad) * i) / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText((max * (1 - i / 4)).toFixed(max < 10 ? 1 : 0), 0, y + 3);
  }
  const legend = [];
  Object.keys(series).sort().forEach((name, i) => {
    const v = series[name];
    const color = COLORS[i % COLORS.length];
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    v.forEach((x, j) => {
      const px = pad + ((w - pad) * (j + HISTORY - v.length)) / HISTORY;
      const py = pad / 2 + (h - pad) * (1 - x / max);
      if (j === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
    });
    ctx.stroke();
    const now = v.length ? v[v.length - 1] : 0;
    const s = el("span", {}, "■ " + name + " " + now.toFixed(1));
    s.style.color = color;
    legend.push(s);
  });
  replace($(legendId), legend);
}

function renderTraffic() {
  chart("chart-faces", "legend-faces", rates("faces"));
  chart("chart-gossip", "legend-gossip", rates("gossip"));
}

function renderAgh(s) {
  const peers = s.agh && s.agh.peers || [];
  const byChannel = new Map();
  for (const p of peers) {
    if (!byChannel.has(p.channel)) byChannel.set(p.channel, []);
    byChannel.get(p.channel).push(p);
  }
  const channels = [...byChannel.keys()].sort().map((ch) => el("div", { class: "channel", "data-channel": ch },
    el("b", {}, ch), " ", el("span", { class: "muted" }, byChannel.get(ch).length + " present"),
    el("ul", { class: "list small" }, ...byChannel.get(ch).map((p) => el("li", { "data-agent": p.peer_id },
      el("code", {}, p.peer_id),
      el("span", { class: "tag " + p.presence }, p.presence),
      p.expires_in !== null && p.expires_in !== undefined
        ? el("span", { class: "tag", "data-expires": String(s.at_ms + p.expires_in * 1000) }, "expires in " + p.expires_in + "s")
        : null)))));
  replace($("agh-channels"), channels.length ? channels : [el("p", { class: "muted" }, "no agent present")]);
  const inter = s.agh && s.agh.interactions || {};
  $("agh-interaction-count").textContent = "(" + (inter.total || 0) + ")";
  replace($("agh-interactions").tBodies[0], (inter.recent || []).map((i) => el("tr", { "data-interaction": i.interaction_id },
    el("td", {}, i.channel), el("td", {}, short(i.interaction_id)),
    el("td", {}, short(i.initiator) + " → " + short(i.target)), el("td", {}, i.state))));
}

function toolIds(card) {
  return (card && card.tools || []).map((t) => typeof t === "string" ? t : t && (t.id || t.toolId)).filter(Boolean);
}

function renderHyperspace(s) {
  const hs = s.hyperspace || {};
  const st = s.status || {};
  $("hs-sessions").textContent = hs.sessions || 0;
  const tools = new Map();
  for (const id of toolIds(hs.own)) tools.set(id, "this node");
  for (const c of hs.cards || []) for (const id of toolIds(c)) if (!tools.has(id)) tools.set(id, c.peerId);
  replace($("hs-tools"), [...tools.entries()].sort().map(([id, where]) => el("li", { "data-tool": id },
    el("code", {}, id), el("span", { class: "tag" }, where === "this node" ? where : short(where)))));
  const now = s.at_ms || Date.now();
  replace($("hs-cards").tBodies[0], (hs.cards || []).map((c) => el("tr", { "data-card": c.peerId },
    el("td", {}, el("code", {}, short(c.peerId))), el("td", {}, c.version),
    el("td", {}, duration((now - (c.updatedAt || now)) / 1000)),
    el("td", { class: c.live ? "good" : "bad" }, c.live ? "live" : "stale"),
    el("td", {}, toolIds(c).join(", ")))));
  const m = st.memory || {};
  replace($("hs-ring").tBodies[0], (m.ring || []).map((r) => el("tr", { "data-member": r.peer_id },
    el("td", {}, el("code", {}, short(r.peer_id)), r.me ? el("span", { class: "tag" }, "this node") : null),
    el("td", {}, (100 * (r.share || 0)).toFixed(1) + " %"),
    el("td", {}, r.held === null || r.held === undefined ? "–" : r.held))));
  const rep = m.replicas || {};
  $("hs-replicas").textContent = rep.target === undefined ? "–"
    : rep.owners + " of " + rep.target + " owners per memory · under target: "
      + (rep.under_target === null || rep.under_target === undefined ? "not checked yet" : rep.under_target)
      + (rep.checked_ms ? " (checked " + duration(((s.at_ms || Date.now()) - rep.checked_ms) / 1000) + " ago)" : "");
  const pairs = [["members", m.members], ["memories held", m.held], ["serve", m.serve], ["embedder", m.embedder]];
  for (const [e, ix] of Object.entries(m.indexes || {})) {
    pairs.push(["index " + e, ix.vectors + " vectors, " + ix.engine + (ix.building ? ", building" : "") + ", staged " + ix.staged + ", tombstones " + ix.tombstones]);
  }
  for (const [k, v] of Object.entries(m.counters || {})) pairs.push([k, v]);
  kv($("hs-memory"), pairs);
  const l = st.learning || {};
  $("hs-playbook-count").textContent = "(" + (l.playbooks || 0) + ")";
  replace($("hs-playbooks").tBodies[0], (l.list || []).map((b) => el("tr", { "data-playbook": b.playbookId },
    el("td", {}, el("code", {}, b.playbookId)), el("td", {}, b.scope),
    el("td", {}, b.size ? b.size.bullets : "…"), el("td", {}, b.size ? b.size.version : "…"))));
  const imp = st.improving || {};
  replace($("hs-libraries").tBodies[0], Object.entries(imp.libraries || {}).sort().map(([t, n]) => el("tr", { "data-library": t },
    el("td", {}, el("code", {}, t)), el("td", {}, n))));
  const pay = st.payments || {};
  $("hs-channel-count").textContent = "(" + (pay.channels || 0) + ", " + (pay.openChannels || []).length + " open listed)";
  replace($("hs-channels").tBodies[0], (pay.openChannels || []).map((c) => el("tr", { "data-channel-id": c.channelId },
    el("td", {}, el("code", {}, short(c.channelId))), el("td", {}, c.role),
    el("td", {}, c.spent + " / " + c.budget), el("td", {}, c.currency))));
  const more = [];
  const flat = (prefix, v) => {
    if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length <= 12) {
      for (const [k, x] of Object.entries(v)) flat(prefix + "." + k, x);
    } else more.push([prefix, v]);
  };
  const without = (o, ...keys) => Object.fromEntries(Object.entries(o || {}).filter(([k]) => !keys.includes(k)));
  flat("learning", without(st.learning, "list"));
  flat("improving", without(st.improving, "libraries"));
  flat("payments", without(st.payments, "openChannels"));
  kv($("hs-more"), more);
}

let lastDiscover = null;
function renderAns(s) {
  const a = s.ans || {};
  $("ans-name").textContent = a.name ? "(" + a.name + ")" : "";
  $("ans-count").textContent = a.agents || 0;
  kv($("ans-states"), Object.entries(a.by_state || {}));
  kv($("ans-tiers"), Object.entries(a.by_tier || {}).map(([t, n]) => ["tier " + t, n]));
  replace($("ans-agents"), (a.recent || []).map((g) => el("li", { "data-agent-id": g.agent_id },
    el("code", {}, g.agent_id), " ", g.label || "", el("span", { class: "tag" }, g.state), el("span", { class: "tag" }, "tier " + g.trust_tier))));
  replace($("ans-audit"), (a.audit || []).map((r) => el("li", {}, "#" + r.seq + " " + (r.record && (r.record.event || r.record.method || r.record.action) || "") + " " + (r.record && (r.record.agent_id || r.record.canonical_id) || ""))));
  const t = (s.traffic && s.traffic.uptime_ms) || 0;
  if (lastDiscover && t > lastDiscover.t) {
    $("ans-discover-rate").textContent = (((s.discovers || 0) - lastDiscover.n) / ((t - lastDiscover.t) / 1000)).toFixed(1);
  }
  lastDiscover = { t, n: s.discovers || 0 };
}

function apply(s) {
  lastSnapshot = s;
  sample(s);
  renderNode(s);
  renderNeighbourhood(s);
  renderTraffic();
  renderAgh(s);
  renderHyperspace(s);
  renderAns(s);
  seq += 1;
  const u = $("last-update");
  u.dataset.seq = String(seq);
  u.textContent = "live · updated " + new Date(s.at_ms || Date.now()).toLocaleTimeString();
  $("live-dot").className = "dot on";
}

// The directory search box: GET /directory/search as the user types (after a pause), with the
// API key; each result shows its source, trust, online state, how to call it and why it ranks
// where it does. Only the answer to the latest query is shown.
const DIR_HINT = "Type what you need, in your own words: the directory searches every agent and tool this node knows by words and by meaning, the live first.";
const TRUST = ["claimed", "signed", "verified"];
let dirAsked = 0;
let dirTimer = null;

function callText(c) {
  c = c || {};
  return [c.face, c.method, c.target].filter(Boolean).join(" ") + (c.address ? " at " + c.address : "");
}

function renderDirectory(result) {
  const hits = result.results || [];
  $("dir-status").textContent = hits.length
    ? hits.length + " result" + (hits.length === 1 ? "" : "s") + " · embedder " + (result.embedder || "?") + " · " + (result.tookMs || 0) + " ms"
    : "no result";
  replace($("dir-results"), hits.map((h) => {
    const trust = h.trust && h.trust.level || "?";
    const online = h.online === true;
    return el("li", { "data-result": h.id, "data-source": h.source, "data-trust": trust,
      "data-online": String(online), class: online ? "online" : "offline" },
      el("div", {},
        el("b", { class: "name" }, h.name),
        el("span", { class: "tag", "data-field": "source" }, h.source),
        el("span", { class: "tag" + (TRUST.includes(trust) ? " " + trust : ""), "data-field": "trust", title: h.trust && h.trust.basis || "" }, trust),
        el("span", { class: "tag " + (online ? "online" : "offline"), "data-field": "online" }, online ? "online" : "offline"),
        el("span", { class: "tag" }, h.kind),
        el("span", { class: "muted small" }, " score " + Number(h.score || 0).toFixed(3))),
      h.description ? el("div", { class: "small" }, h.description) : null,
      el("div", { class: "small" }, "call: ", el("code", { "data-field": "call" }, callText(h.call))),
      el("div", { class: "explain", "data-field": "explain" }, h.explain && h.explain.text || ""));
  }));
}

async function searchDirectory() {
  clearTimeout(dirTimer);
  const q = $("dir-query").value.trim();
  const asked = ++dirAsked;
  $("dir-status").className = "muted small";
  if (!q) {
    replace($("dir-results"), []);
    $("dir-status").textContent = DIR_HINT;
    return;
  }
  const params = new URLSearchParams({ q });
  if ($("dir-online").checked) params.set("online", "true");
  $("dir-status").textContent = "searching…";
  let text;
  try {
    const res = await fetch("/directory/search?" + params, { headers: headers(), cache: "no-store" });
    if (asked !== dirAsked) return;
    if (res.status === 401) {
      $("key-form").hidden = false;
      text = "this node requires its API key";
    } else {
      const body = await res.json().catch(() => ({}));
      if (asked !== dirAsked) return;
      if (res.ok) {
        renderDirectory(body);
        return;
      }
      text = body.error || "HTTP " + res.status;
    }
  } catch (err) {
    if (asked !== dirAsked) return;
    text = err.message;
  }
  replace($("dir-results"), []);
  $("dir-status").textContent = text;
  $("dir-status").className = "bad small";
}

function scheduleSearch() {
  clearTimeout(dirTimer);
  dirTimer = setTimeout(searchDirectory, 300);
}

$("dir-status").textContent = DIR_HINT;
$("dir-query").addEventListener("input", scheduleSearch);
$("dir-online").addEventListener("change", scheduleSearch);
$("dir-form").addEventListener("submit", (e) => {
  e.preventDefault();
  searchDirectory();
});

// Expiry countdowns tick between snapshots.
setInterval(() => {
  for (const e of document.querySelectorAll("[data-expires]")) {
    e.textContent = "expires in " + Math.max(0, Math.round((Number(e.dataset.expires) - Date.now()) / 1000)) + "s";
  }
}, 1000);

$("topic-select").addEventListener("change", (e) => {
  selectedTopic = e.target.value;
  if (lastSnapshot) renderNeighbourhood(lastSnapshot);
});

$("key-form").querySelector("form").addEventListener("submit", (e) => {
  e.preventDefault();
  key = $("key-input").value.trim();
  sessionStorage.setItem("agora-key", key);
  $("key-form").hidden = true;
  connect();
  if ($("dir-query").value.trim()) searchDirectory();
});

// The event stream, read with fetch so that the API key can go in a header (EventSource cannot
// send one). Reconnects after a pause when the stream ends.
async function connect() {
  try {
    const res = await fetch("/dashboard/events", { headers: headers(), cache: "no-store" });
    if (res.status === 401) {
      $("key-form").hidden = false;
      $("key-error").textContent = key ? "the key was refused" : "";
      $("live-dot").className = "dot off";
      return;
    }
    if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (data) apply(JSON.parse(data));
      }
    }
  } catch (err) {
    $("last-update").textContent = "disconnected (" + err.message + "), retrying…";
  }
  $("live-dot").className = "dot off";
  setTimeout(connect, 2000);
}

connect();
