"""The dashboard's one page: HTML, CSS and JS inline, made by the server (no build step).

The same page shows the jobs table (`/`) and one job (`/jobs/NAME`); its script reads
the JSON API and follows `/api/stream` (server-sent events). Text from jobs is only ever
set as textContent, never parsed as HTML.
"""

from __future__ import annotations

import html

STYLE = """
*{box-sizing:border-box}body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1f2d3d}
header{background:#1f2d3d;color:#fff;padding:8px 12px;display:flex;gap:12px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}#live{font-size:12px;opacity:.8}
main{padding:8px 12px;max-width:1200px;margin:auto}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid #e3e7ec;vertical-align:top}
th{font-size:12px;color:#5a6b7d}.st{font-weight:600}.failed,.fault{color:#c00}
.succeeded{color:#1a7f37}.running{color:#0b5cad}.backoff,.stopping{color:#b35900}
pre{background:#f5f7f9;padding:6px;overflow:auto;max-height:360px;font-size:12px;white-space:pre-wrap}
section{margin:12px 0}h2{font-size:15px;margin:8px 0}button{padding:6px 14px;margin-right:6px}
details summary{cursor:pointer}svg{width:100%;height:auto;background:#fff;border:1px solid #e3e7ec}
.muted{color:#5a6b7d}
@media (max-width:700px){thead{display:none}table,tbody,tr,td{display:block;width:100%}
tr{border:1px solid #e3e7ec;border-radius:6px;margin:6px 0;padding:4px}
td{border:0;padding:2px 4px}td[data-l]:before{content:attr(data-l) ": ";color:#5a6b7d}}
"""

SCRIPT = r"""
const CSRF = document.querySelector('meta[name=csrf]').content;
const CONTROL = document.querySelector('meta[name=control]').content === 'true';
const JOB = location.pathname.startsWith('/jobs/') ?
  decodeURIComponent(location.pathname.slice(6)) : null;
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  for (const k of kids) n.append(k instanceof Node ? k : document.createTextNode(k ?? ''));
  return n;
}
async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: 'same-origin'}, opts || {}));
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.status);
  return body;
}
function dur(s) {
  if (s == null) return '-';
  s = Math.round(s); const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
  return h ? `${h}h${String(m).padStart(2, '0')}m` : `${m}m${String(s % 60).padStart(2, '0')}s`;
}
function progress(p) {
  if (!p) return '-';
  if (p.epoch != null) return `epoch ${p.epoch}/${p.epochs ?? '?'}`;
  if (p.step != null) return `step ${p.step}${p.total != null ? '/' + p.total : ''}`;
  return '-';
}
function loss(p) {
  if (!p) return '-';
  if (p.losses && typeof p.losses === 'object')
    return Object.values(p.losses).map((v) => Number(v).toFixed(3)).join('/');
  return p.loss != null ? Number(p.loss).toPrecision(4) : '-';
}
function spent(j) {
  const money = j.cost ? ` ${Number(j.cost).toFixed(2)} ${j.currency || ''}` : '';
  return dur(j.elapsed_s) + money;
}
const COLS = [
  ['job', (j) => el('a', {href: '/jobs/' + encodeURIComponent(j.name)}, j.name)],
  ['state', (j) => el('span', {class: 'st ' + j.state}, j.state)],
  ['device', (j) => j.device ?? '-'], ['progress', (j) => progress(j.progress)],
  ['ETA', (j) => dur(j.progress && j.progress.eta_s)], ['loss', (j) => loss(j.progress)],
  ['attempts', (j) => String(j.attempts)],
  ['last fault', (j) => el('span', {class: 'fault'}, j.last_fault || '-')],
  ['spent', spent], ['reason', (j) => el('span', {class: 'muted'}, j.reason || '')],
];
function renderJobs(jobs) {
  if (JOB) { const mine = jobs.find((j) => j.name === JOB); if (mine) renderSummary(mine); }
  const t = $('jobs'); if (!t) return;
  const head = el('tr', {}, ...COLS.map(([h]) => el('th', {}, h)));
  const rows = jobs.map((j) => el('tr', {'data-job': j.name, 'data-state': j.state},
    ...COLS.map(([h, f]) => el('td', {'data-l': h}, f(j)))));
  t.replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows));
  if (!jobs.length) t.append(el('tr', {}, el('td', {}, 'no jobs yet: rsup start JOB.yaml')));
}
function renderSummary(j) {
  $('summary').replaceChildren(el('span', {class: 'st ' + j.state}, j.state), ' ',
    el('span', {class: 'muted'}, j.reason || ''), el('br'),
    `device ${j.device ?? '-'} · ${progress(j.progress)}` +
    ` · ETA ${dur(j.progress && j.progress.eta_s)}` +
    ` · loss ${loss(j.progress)} · attempt ${j.attempts} · spent ${spent(j)}`);
}
const SVGNS = 'http://www.w3.org/2000/svg';
function sv(tag, attrs, text) {
  const n = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text) {
    const t = document.createElementNS(SVGNS, 'title'); t.textContent = text; n.append(t);
  }
  return n;
}
function chart(d) {
  const W = 800, H = 260, P = 30, span = Math.max(d.span, 1);
  const top = Math.max(d.total || 0, ...d.progress.map((p) => p.value), 1);
  const x = (t) => P + (W - 2 * P) * t / span, y = (v) => H - P - (H - 2 * P) * v / top;
  const s = sv('svg', {viewBox: `0 0 ${W} ${H}`, id: 'chart'});
  for (const a of d.attempts)
    s.append(sv('rect', {x: x(a.start), y: P, width: Math.max(1, x(a.end) - x(a.start)),
      height: H - 2 * P, fill: a.colour},
      `attempt ${a.n} on ${a.device}: ${a.fault || ''} ${a.decision || ''}`));
  s.append(sv('line', {x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: '#888'}));
  const byAttempt = {};
  for (const p of d.progress) (byAttempt[p.attempt] = byAttempt[p.attempt] || []).push(p);
  for (const pts of Object.values(byAttempt))
    s.append(sv('polyline', {fill: 'none', stroke: '#1f2d3d', 'stroke-width': 2,
      points: pts.map((p) => `${x(p.t)},${y(p.value)}`).join(' ')}));
  for (const f of d.faults)
    s.append(sv('line', {x1: x(f.t), x2: x(f.t), y1: P, y2: H - P, stroke: '#e00000',
      'stroke-width': 2}, `attempt ${f.attempt}: ${f.label} ${f.detail}`));
  for (const m of d.decisions)
    s.append(sv('circle', {cx: x(m.t), cy: P - 8, r: 5, fill: '#1a7f37'},
      `${m.label}: ${m.reason}`));
  for (const m of d.drills)
    s.append(sv('rect', {x: x(m.t) - 4, y: P - 26, width: 8, height: 8, fill: '#8e44ad'}, m.label));
  s.append(sv('text', {x: P, y: H - 8, 'font-size': 11}, ''));
  s.lastChild.textContent = `${d.unit} 0..${top} over ${dur(d.span)}`;
  $('chart-box').replaceChildren(s);
}
const HIDE = new Set(['ts', 'job', 'attempt', 'event']);
function eventText(e) {
  return e.reason || e.message || (e.category ? `${e.category} ${e.signature || ''}` : '') ||
    (e.new ? `${e.old} -> ${e.new}` : '') || e.verdict || '';
}
function eventRow(e) {
  const rest = Object.fromEntries(Object.entries(e).filter(([k]) => !HIDE.has(k)));
  return el('tr', {}, el('td', {'data-l': 'time'}, new Date(e.ts * 1000).toLocaleTimeString()),
    el('td', {'data-l': 'attempt'}, e.attempt == null ? '' : '#' + e.attempt),
    el('td', {'data-l': 'event', class: /^(fault|hang)/.test(e.event) ? 'fault' : ''}, e.event),
    el('td', {}, el('details', {}, el('summary', {}, eventText(e)),
      el('pre', {}, JSON.stringify(rest, null, 1)))));
}
function renderEvents(events) {
  $('events').replaceChildren(...events.slice(-300).reverse().map(eventRow));
  const probes = events.filter((e) => e.event === 'probe_verdict');
  $('probes').replaceChildren(...probes.map((e) => el('li', {},
    `#${e.attempt ?? '-'} ${e.verdict} on ${e.device ?? '?'} ` + JSON.stringify(e.env || {}))));
  const hang = events.filter((e) => e.event === 'hang_detected' && e.stacks).pop();
  $('stack-box').hidden = !hang;
  if (hang) $('stack').textContent = typeof hang.stacks === 'string' ? hang.stacks :
    JSON.stringify(hang.stacks, null, 1);
}
let events = [], log = {attempt: null, offset: 0}, busy = {};
function once(key, fn) {  // one request of a kind in flight; a request asked meanwhile follows
  if (busy[key]) { busy[key] = 2; return; }
  busy[key] = 1;
  fn().catch((e) => console.warn(key, e)).finally(() => {
    const again = busy[key] === 2; busy[key] = 0; if (again) once(key, fn); });
}
const base = () => '/api/jobs/' + encodeURIComponent(JOB);
const refreshReport = () => once('report', async () => chart(await api(base() + '/report')));
const followLog = () => once('log', async () => {
  let q = log.attempt == null ? '?lines=200' : `?attempt=${log.attempt}&offset=${log.offset}`;
  let c = await api(base() + '/logs' + q);
  const moved = c.ended && c.last_attempt > c.attempt && !c.data;
  if (c.attempt != null && log.attempt != null && moved) {
    c = await api(base() + `/logs?attempt=${c.attempt + 1}&offset=0`);
    $('log').textContent += `\n--- rsup: attempt ${c.attempt} ---\n`;
  }
  log = {attempt: c.attempt, offset: c.offset};
  const pre = $('log'); pre.textContent = (pre.textContent + c.data).slice(-200000);
  pre.scrollTop = pre.scrollHeight;
});
async function control(op) {
  try {
    await api(base() + '/' + op, {method: 'POST', headers: {'X-CSRF-Token': CSRF}});
  } catch (e) { alert(`${op}: ${e.message}`); }
}
function connect() {
  const es = new EventSource('/api/stream' + (JOB ? '?job=' + encodeURIComponent(JOB) : ''));
  es.onopen = () => { $('live').textContent = 'live'; };
  es.onerror = () => { $('live').textContent = 'reconnecting…'; };
  es.addEventListener('jobs', (m) => renderJobs(JSON.parse(m.data)));
  es.addEventListener('event', (m) => {
    events.push(JSON.parse(m.data)); renderEvents(events); refreshReport(); });
  es.addEventListener('output', followLog);
}
async function start() {
  if (JOB) {
    document.title = `${JOB} · rsup`;
    $('view').replaceChildren($('job-tpl').content.cloneNode(true));
    $('name').textContent = JOB;
    $('buttons').hidden = !CONTROL;
    events = await api(base() + '/events'); renderEvents(events);
    refreshReport(); followLog();
  } else {
    $('view').replaceChildren(el('table', {id: 'jobs'}));
  }
  connect();
}
start().catch((e) => { $('view').textContent = 'error: ' + e.message; });
"""

BODY = """
<header><a href="/">rsup</a><span id="live">connecting…</span></header>
<main id="view"></main>
<template id="job-tpl">
<h2 id="name"></h2><div id="summary" class="muted"></div>
<div id="buttons"><button onclick="control('stop')">Stop</button>
<button onclick="control('restart')">Restart</button></div>
<section><h2>Progress and loss across attempts</h2><div id="chart-box"></div>
<div class="muted">bands: attempts (colour: device) · red: faults · green: decisions ·
purple: drills</div></section>
<section id="stack-box" hidden><h2>Hung stack</h2><pre id="stack"></pre></section>
<section><h2>Output (following)</h2><pre id="log"></pre></section>
<section><h2>Probe verdicts</h2><ul id="probes"></ul></section>
<section><h2>Events (newest first)</h2><table><tbody id="events"></tbody></table></section>
</template>
"""


def page(csrf: str, control: bool) -> str:
    """The page, with this user's anti-forgery token and whether controls are on."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="csrf" content="{html.escape(csrf)}">'
        f'<meta name="control" content="{"true" if control else "false"}">'
        f"<title>rsup</title><style>{STYLE}</style></head><body>{BODY}"
        f"<script>{SCRIPT}</script></body></html>"
    )
