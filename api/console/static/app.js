// sandboxd web console. Plain JavaScript, no dependencies, no build step.
//
// Security rules this file keeps (see SECURITY.md, "Web console"):
// - the API key lives only in sessionStorage (this tab) and travels only in
//   the OPEN-SANDBOX-API-KEY header of same-origin fetches, never in a URL;
// - text from the server or a sandbox is put into the page with textContent,
//   never parsed as HTML;
// - files from a sandbox are fetched as blobs: images are shown in <img>,
//   text in <pre>, everything else is only offered for download.
'use strict';

const KEY_STORAGE = 'sandboxd.apiKey';
const EXECD_PORT = 44772;
// SANDBOX_ID is the form of the ids sandboxd gives (UUIDs): a word no shell
// splits, expands or reads as an option.
const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const CHART_SECONDS = 300;
const STATES = ['Pending', 'Running', 'Paused', 'Failed', 'Terminated'];

// ---- DOM helpers --------------------------------------------------------

// h builds an element; attributes starting with "on" are listeners,
// children are nodes or strings (always text).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

function mount(...nodes) {
  const main = $('main');
  main.replaceChildren(...nodes);
}

// ---- time formatting ------------------------------------------------------

function duration(ms) {
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  let out;
  if (d) out = `${d}d ${hh}h`;
  else if (hh) out = `${hh}h ${String(m).padStart(2, '0')}m`;
  else if (m) out = `${m}m ${String(s).padStart(2, '0')}s`;
  else out = `${s}s`;
  return neg ? '-' + out : out;
}

function localTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n, i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < units.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

// ---- the API --------------------------------------------------------------

class APIError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

const session = {
  key() { return sessionStorage.getItem(KEY_STORAGE) || ''; },
  set(k) { sessionStorage.setItem(KEY_STORAGE, k); },
  clear() { sessionStorage.clear(); }, // the key and the command history
};

// request calls the API on this origin with the key in its header. JSON
// bodies are sent as application/json; FormData as multipart.
async function request(method, path, opts = {}) {
  const headers = { 'OPEN-SANDBOX-API-KEY': opts.key ?? session.key() };
  let body = opts.body;
  if (body !== undefined && !(body instanceof FormData)) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(body);
  }
  const res = await fetch(path, {
    method, headers, body, signal: opts.signal,
    credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer',
  });
  if (!res.ok) {
    let code = '', message = '';
    try {
      const e = await res.json();
      code = e.code || '';
      message = e.message || '';
    } catch { /* not the envelope */ }
    if (res.status === 401 && opts.key === undefined) {
      signOut('The server refused the key: ' + (message || code));
    }
    throw new APIError(res.status, code, message || `${method} ${path}: HTTP ${res.status}`);
  }
  return res;
}

async function getJSON(path, opts) {
  return (await request('GET', path, opts)).json();
}

const enc = encodeURIComponent;
const sandboxURL = (id, rest = '') => `/v1/sandboxes/${enc(id)}${rest}`;
const execdURL = (id, rest) => `/sandboxes/${enc(id)}/proxy/${EXECD_PORT}${rest}`;

// readJSONLines calls onObject with each JSON object of a streamed
// response that carries one per line (execd's command events, separated by
// blank lines, and its metrics, optionally as SSE "data:" lines).
async function readJSONLines(res, onObject) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim().replace(/^data:\s*/, '');
      buf = buf.slice(i + 1);
      if (!line) continue;
      let obj;
      try { obj = JSON.parse(line); } catch { continue; }
      onObject(obj);
    }
  }
}

// ---- views and their clean-up --------------------------------------------

// Everything a view starts (timers, streams) is stopped when the next one
// is shown.
let cleanups = [];
function onLeave(fn) { cleanups.push(fn); }
function leave() {
  for (const fn of cleanups) {
    try { fn(); } catch { /* already stopped */ }
  }
  cleanups = [];
}
function every(ms, fn) {
  const t = setInterval(fn, ms);
  onLeave(() => clearInterval(t));
}
function abortable() {
  const ac = new AbortController();
  onLeave(() => ac.abort());
  return ac;
}

function signOut(why) {
  session.clear();
  showSignIn(why);
}

function route() {
  leave();
  if (!session.key()) {
    showSignIn();
    return;
  }
  $('signout').hidden = false;
  $('nav').replaceChildren(h('a', { href: '#/' }, 'Sandboxes'));
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  if (parts[0] === 'sandbox' && parts[1]) showSandbox(parts[1], parts[2] || 'overview');
  else showList();
}

// ---- sign-in --------------------------------------------------------------

function showSignIn(why) {
  leave();
  $('signout').hidden = true;
  $('nav').replaceChildren();
  $('health').textContent = '';
  const input = h('input', { type: 'password', id: 'apikey', autocomplete: 'off', placeholder: 'OPEN-SANDBOX-API-KEY', required: true });
  const err = h('p', { class: 'error', id: 'signin-error' }, why || '');
  const form = h('form', { class: 'card signin', id: 'signin', novalidate: true },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'Enter an API key of this sandboxd ([server] api_key). It is kept in this tab only and sent in the OPEN-SANDBOX-API-KEY header.'),
    input,
    h('button', { type: 'submit', id: 'signin-button' }, 'Sign in'),
    err);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    err.textContent = '';
    try {
      await request('GET', '/v1/sandboxes?pageSize=1', { key });
    } catch (e) {
      err.textContent = e.status === 401 ? 'The server refused this key.' : `Cannot reach the API: ${e.message}`;
      return;
    }
    session.set(key);
    route();
  });
  mount(form);
  input.focus();
}

// ---- sandbox list ---------------------------------------------------------

const listFilter = { states: [], metadata: '' };

function badge(state) {
  return h('span', { class: `badge ${state}` }, state || '?');
}

function chips(md) {
  return Object.entries(md || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`));
}

function expiryText(sb, now) {
  if (!sb.expiresAt) return { text: 'never', cls: 'muted' };
  const left = new Date(sb.expiresAt).getTime() - now;
  return { text: left > 0 ? 'in ' + duration(left) : 'due', cls: left < 60000 ? 'soon' : '' };
}

function showList() {
  const ac = abortable();
  const stateBoxes = STATES.map((s) => {
    const box = h('input', { type: 'checkbox', value: s, checked: listFilter.states.includes(s) });
    return { s, box, label: h('label', {}, box, s) };
  });
  const md = h('input', { id: 'filter-metadata', placeholder: 'metadata: team=ml&env=dev', value: listFilter.metadata, size: 28 });
  const err = h('p', { class: 'error' });
  const tbody = h('tbody', { id: 'sandboxes' });
  const count = h('span', { class: 'muted small' });
  const poolsBox = h('div', { class: 'pools', id: 'pools' });
  const poolsCard = h('section', { class: 'card', hidden: true }, h('h2', {}, 'Pools'), poolsBox);
  let items = [], activity = {};

  const apply = () => {
    listFilter.states = stateBoxes.filter((b) => b.box.checked).map((b) => b.s);
    listFilter.metadata = md.value.trim();
    refresh();
  };
  for (const b of stateBoxes) b.box.addEventListener('change', apply);
  md.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });

  const render = () => {
    const now = Date.now();
    const rows = items.map((sb) => {
      const exp = expiryText(sb, now);
      const last = activity[sb.id];
      return h('tr', { 'data-id': sb.id },
        h('td', { class: 'nowrap' }, h('a', { href: `#/sandbox/${enc(sb.id)}`, class: 'mono' }, sb.id)),
        // Why it is not running (asleep on idle, paused by hand, killed for
        // memory…); a running sandbox's reason says nothing more.
        h('td', { class: 'nowrap' }, badge(sb.status.state), sb.status.state !== 'Running' && sb.status.reason
          ? h('span', { class: 'muted small reason' }, ' ' + sb.status.reason) : null),
        h('td', { class: 'mono small nowrap' }, sb.image ? sb.image.uri : (sb.snapshotId ? `snapshot ${sb.snapshotId}` : '—')),
        h('td', {}, chips(sb.metadata)),
        h('td', { class: `num ${exp.cls}`, title: sb.expiresAt ? localTime(sb.expiresAt) : 'manual clean-up' }, exp.text),
        h('td', { class: 'num', title: last ? localTime(last) : '' }, last ? duration(now - new Date(last).getTime()) : '—'),
        h('td', { class: 'num muted', title: localTime(sb.createdAt) }, duration(now - new Date(sb.createdAt).getTime()) + ' ago'));
    });
    if (!rows.length) rows.push(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No sandboxes.')));
    tbody.replaceChildren(...rows);
  };

  const refresh = async () => {
    const q = new URLSearchParams({ pageSize: '200' });
    for (const s of listFilter.states) q.append('state', s);
    if (listFilter.metadata) q.set('metadata', listFilter.metadata);
    try {
      const list = await getJSON(`/v1/sandboxes?${q}`, { signal: ac.signal });
      items = list.items;
      const total = list.pagination.totalItems;
      count.textContent = `${total} sandbox${total === 1 ? '' : 'es'}` +
        (total > items.length ? ` (showing ${items.length}; narrow the filter)` : '');
      const aq = new URLSearchParams();
      for (const sb of items) aq.append('id', sb.id);
      activity = items.length ? await getJSON(`/console/api/activity?${aq}`, { signal: ac.signal }) : {};
      err.textContent = '';
    } catch (e) {
      if (e.name !== 'AbortError') err.textContent = e.message;
    }
    render();
    try {
      const pools = (await getJSON('/v1/pools', { signal: ac.signal })).items || [];
      poolsCard.hidden = pools.length === 0;
      poolsBox.replaceChildren(...pools.map(poolCard));
    } catch { poolsCard.hidden = true; }
  };

  mount(
    h('section', { class: 'card' },
      h('div', { class: 'spread' }, h('h1', {}, 'Sandboxes'), count),
      h('div', { class: 'row filters' },
        h('span', { class: 'muted' }, 'State:'), stateBoxes.map((b) => b.label), md,
        h('button', { class: 'ghost', type: 'button', onclick: apply }, 'Filter')),
      err,
      h('table', {},
        h('thead', {}, h('tr', {}, ['ID', 'State', 'Image', 'Metadata', 'Expires', 'Idle', 'Created'].map((c) => h('th', {}, c)))),
        tbody)),
    poolsCard);
  refresh();
  every(3000, refresh);
  every(1000, render);
}

function poolCard(p) {
  const cap = p.capacitySpec || {};
  const target = Math.min(cap.bufferMax ?? 0, cap.poolMax ?? cap.bufferMax ?? 0);
  const st = p.status || { available: 0, allocated: 0, total: 0 };
  const pct = target ? Math.min(100, (100 * st.available) / target) : 0;
  const fill = h('div', {});
  fill.style.width = `${pct}%`;
  return h('div', { class: 'pool' },
    h('div', { class: 'spread' }, h('strong', {}, p.name), h('span', { class: 'muted small' }, `${st.available} / ${target} ready`)),
    h('div', { class: 'bar', title: `${Math.round(pct)}% full` }, fill),
    h('div', { class: 'muted small' }, `${st.allocated} claimed · ${st.total} total`));
}

// ---- one sandbox ----------------------------------------------------------

const TABS = [['overview', 'Overview'], ['commands', 'Commands'], ['files', 'Files'], ['logs', 'Logs']];

function showSandbox(id, tab) {
  const ac = abortable();
  const title = h('h1', { class: 'mono' }, id);
  const state = h('span', {});
  const expiry = h('span', { class: 'muted' });
  const err = h('p', { class: 'error', id: 'sandbox-error' });
  const actions = h('div', { class: 'row' });
  const body = h('div', {});
  let sb = null;

  const act = (action, label, cls, handler) => h('button', { class: cls, type: 'button', 'data-action': action, onclick: handler }, label);
  // The buttons are made once and only updated, so that a click is never
  // lost to a redraw.
  const renewBtn = act('renew', 'Renew', 'ghost', () => renew());
  const pauseBtn = act('pause', 'Pause', 'ghost', () => (sb && sb.status.state === 'Paused' ? resume() : pause()));
  const killBtn = act('kill', 'Kill', 'danger', () => kill());
  actions.append(renewBtn, pauseBtn, killBtn);
  const renderHead = () => {
    if (!sb) return;
    const s = sb.status.state;
    state.replaceChildren(badge(s));
    const exp = expiryText(sb, Date.now());
    expiry.textContent = sb.expiresAt ? `expires ${exp.text}` : 'no expiry';
    expiry.className = exp.cls || 'muted';
    pauseBtn.textContent = s === 'Paused' ? 'Resume' : 'Pause';
    pauseBtn.dataset.action = s === 'Paused' ? 'resume' : 'pause';
    pauseBtn.disabled = s !== 'Running' && s !== 'Paused';
    renewBtn.disabled = !sb.expiresAt;
  };
  // loadError is what the last refresh found wrong; actionError what the
  // last button did, kept until the next action.
  let loadError = '', actionError = '';
  const showError = () => { err.textContent = actionError || loadError; };
  const load = async () => {
    try {
      sb = await getJSON(sandboxURL(id), { signal: ac.signal });
      seen.note(sb);
      loadError = '';
      renderHead();
      onUpdate(sb);
    } catch (e) {
      if (e.name === 'AbortError') return;
      loadError = e.status === 404 ? 'This sandbox no longer exists.' : e.message;
    }
    showError();
  };
  const seen = statusHistory(id);
  let onUpdate = () => {};

  async function renew() {
    const minutes = await ask('Renew expiration', `Set ${id} to expire this many minutes from now.`, { label: 'Minutes', value: '30' });
    if (minutes === null) return;
    const n = Number(minutes);
    if (!(n > 0)) { actionError = 'Minutes must be a positive number.'; showError(); return; }
    await perform(() => request('POST', sandboxURL(id, '/renew-expiration'), { body: { expiresAt: new Date(Date.now() + n * 60000).toISOString() } }));
  }
  async function pause() {
    if (await ask('Pause sandbox', `Freeze every process of ${id}? Commands and files are unavailable until it is resumed.`)) {
      await perform(() => request('POST', sandboxURL(id, '/pause'), { body: {} }));
    }
  }
  async function resume() {
    if (await ask('Resume sandbox', `Resume ${id}?`)) {
      await perform(() => request('POST', sandboxURL(id, '/resume'), { body: {} }));
    }
  }
  async function kill() {
    if (await ask('Kill sandbox', `Delete ${id}: its container, its volumes and everything in it. This cannot be undone.`, { danger: true, ok: 'Kill' })) {
      if (await perform(() => request('DELETE', sandboxURL(id)))) location.hash = '#/';
    }
  }
  // perform runs an action, then refreshes; it reports whether it worked.
  async function perform(fn) {
    let ok = true;
    try {
      await fn();
      actionError = '';
    } catch (e) {
      actionError = e.message;
      ok = false;
    }
    await load();
    return ok;
  }

  mount(
    h('section', { class: 'card' },
      h('div', { class: 'spread' },
        h('div', { class: 'row' }, h('a', { href: '#/' }, '← Sandboxes'), title, state, expiry),
        actions),
      err,
      h('nav', { class: 'tabs' }, TABS.map(([t, label]) =>
        h('a', { href: `#/sandbox/${enc(id)}/${t}`, class: t === tab ? 'on' : '' }, label))),
      body));

  const views = { overview: overviewTab, commands: commandsTab, files: filesTab, logs: logsTab };
  onUpdate = (views[tab] || overviewTab)(id, body, ac, seen) || (() => {});
  load();
  every(3000, load);
  every(1000, renderHead);
}

// statusHistory remembers the states this tab has seen a sandbox in.
function statusHistory(id) {
  const key = 'sandboxd.history.' + id;
  let seen = [];
  try { seen = JSON.parse(sessionStorage.getItem(key) || '[]'); } catch { seen = []; }
  return {
    note(sb) {
      const last = seen[seen.length - 1];
      if (!last || last.state !== sb.status.state || last.reason !== sb.status.reason) {
        seen.push({ state: sb.status.state, reason: sb.status.reason || '', at: sb.status.lastTransitionAt || new Date().toISOString() });
        seen = seen.slice(-20);
        sessionStorage.setItem(key, JSON.stringify(seen));
      }
    },
    list() { return seen; },
  };
}

// ---- overview: info, charts, status history, terminal ----------------------

function overviewTab(id, body, ac, seen) {
  const info = h('dl', { class: 'info' });
  const forks = h('div', { id: 'forks' });
  const forksCard = h('div', { class: 'card' }, h('h2', {}, 'Forks'), forks);
  const hist = h('ol', { class: 'history' });
  const cpu = chart('CPU', '%', 1);
  const mem = chart('Memory', 'MiB', 1);
  const note = h('p', { class: 'muted small' }, 'Watching resource use keeps the sandbox active (it counts as use for idle expiry).');
  // The shell line appears only once the API has returned this sandbox, and
  // only for an id of SANDBOX_ID's form: the id in the URL is whatever a
  // link said, and the line is meant to be pasted into a shell.
  const shell = h('div', { class: 'shellline' }, h('span', { class: 'muted' }, 'Waiting for the sandbox…'));
  let shellShown = false;
  const showShell = (sb) => {
    if (shellShown || sb.id !== id || !SANDBOX_ID.test(id)) return;
    shellShown = true;
    const cmd = `sandboxd shell ${id}`;
    const code = h('code', { id: 'shell-line' }, cmd);
    const copy = h('button', { class: 'ghost small', type: 'button', onclick: async () => {
      try { await navigator.clipboard.writeText(cmd); copy.textContent = 'Copied'; } catch {
        const r = document.createRange(); r.selectNodeContents(code);
        const sel = getSelection(); sel.removeAllRanges(); sel.addRange(r);
      }
    } }, 'Copy');
    shell.replaceChildren(code, copy);
  };
  body.append(
    h('div', { class: 'grid2' },
      h('div', { class: 'card' }, h('h2', {}, 'Details'), info),
      h('div', { class: 'card' }, h('h2', {}, 'Status history'), hist)),
    h('div', { class: 'grid2' }, cpu.el, mem.el),
    note,
    forksCard,
    h('div', { class: 'card' }, h('h2', {}, 'Terminal'),
      h('p', { class: 'muted' }, 'For an interactive shell, run in a terminal (server and key from OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY or the config file):'),
      shell));

  watchMetrics(id, ac, (m) => {
    cpu.add(m.timestamp, m.cpu_used_pct, m.cpu_count ? ` of ${m.cpu_count} CPU` : '');
    mem.add(m.timestamp, m.mem_used_mib, m.mem_total_mib ? ` of ${m.mem_total_mib.toFixed(0)} MiB` : '');
  });

  return (sb) => {
    showShell(sb);
    const rows = [
      ['State', `${sb.status.state}${sb.status.reason ? ' · ' + sb.status.reason : ''}`],
      ['Message', sb.status.message || '—'],
      ['Image', sb.image ? sb.image.uri : '—'],
      ['Entrypoint', (sb.entrypoint || []).join(' ') || '—'],
      ['Created', localTime(sb.createdAt)],
      ['Expires', sb.expiresAt ? localTime(sb.expiresAt) : 'never (manual clean-up)'],
      ['Metadata', Object.keys(sb.metadata || {}).length ? chips(sb.metadata) : '—'],
    ];
    info.replaceChildren(...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    hist.replaceChildren(...seen.list().slice().reverse().map((e) =>
      h('li', {}, badge(e.state), ' ', h('span', { class: 'muted small' }, `${e.reason} · ${localTime(e.at)}`))));
    showForks(id, forks, ac);
  };
}

// showForks lists the fork tasks a sandbox is the source or a target of:
// where it came from, and the sandboxes forked from it.
async function showForks(id, el, ac) {
  let list;
  try {
    list = await getJSON(`/v1/forks?sandboxId=${enc(id)}&pageSize=50`, { signal: ac.signal });
  } catch (e) {
    if (e.name !== 'AbortError') el.replaceChildren(h('p', { class: 'muted' }, `Forks unavailable: ${e.message}`));
    return;
  }
  const link = (sid) => h('a', { class: 'mono', href: `#/sandbox/${enc(sid)}/overview` }, sid);
  const rows = list.items.map((f) => {
    const from = f.sourceSandboxId !== id;
    return h('li', { 'data-fork': f.id },
      from ? ['Forked from ', link(f.sourceSandboxId)] : [`Fork into ${f.count}`],
      ' ', badge(f.status.state),
      f.status.reason ? h('span', { class: 'muted small' }, ` ${f.status.reason}`) : null,
      !from && (f.sandboxIds || []).length ? [' → ', ...f.sandboxIds.flatMap((s, i) => (i ? [', ', link(s)] : [link(s)]))] : null,
      h('span', { class: 'muted small' }, ` · task ${f.id} · ${localTime(f.createdAt)}`));
  });
  el.replaceChildren(rows.length ? h('ul', { class: 'forks' }, rows)
    : h('p', { class: 'muted' }, 'No forks. From a terminal: sandboxd fork -n N ID'));
}

// watchMetrics reads execd's /metrics/watch (one JSON object per line each
// second) and reconnects while the page is open.
async function watchMetrics(id, ac, onSample) {
  while (!ac.signal.aborted) {
    try {
      const res = await request('GET', execdURL(id, '/metrics/watch'), { signal: ac.signal });
      await readJSONLines(res, onSample);
    } catch {
      if (ac.signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, 3000));
  }
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// chart draws up to the last CHART_SECONDS of one series on a canvas, on a
// scale that fits what it shows (at least floor).
function chart(name, unit, floor) {
  const canvas = h('canvas', { width: 560, height: 150 });
  const value = h('span', { class: 'value' }, '—');
  const el = h('div', { class: 'card chart', 'data-chart': name.toLowerCase() },
    h('div', { class: 'spread' }, h('h2', {}, name), value), canvas);
  const points = [];
  const draw = () => {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 560, ht = canvas.clientHeight || 150;
    canvas.width = w * dpr; canvas.height = ht * dpr;
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    const now = Date.now();
    const span = Math.min(CHART_SECONDS * 1000, Math.max(60000, now - (points[0]?.t ?? now)));
    const t0 = now - span;
    const vis = points.filter((p) => p.t >= t0);
    const max = niceCeil(Math.max(floor, ...vis.map((p) => p.v * 1.15)));
    const left = 58, top = 6, bottom = ht - 18;
    const x = (t) => left + ((t - t0) / span) * (w - left - 4);
    const y = (v) => bottom - (v / max) * (bottom - top);
    g.font = '11px system-ui, sans-serif';
    g.textAlign = 'right';
    g.textBaseline = 'middle';
    for (const f of [0, 0.5, 1]) {
      const yy = Math.round(y(max * f)) + 0.5;
      g.strokeStyle = '#e3e6eb'; g.lineWidth = 1;
      g.beginPath(); g.moveTo(left, yy); g.lineTo(w - 4, yy); g.stroke();
      const v = max * f;
      g.fillStyle = '#667085';
      g.fillText(`${v < 10 && v ? v.toFixed(1) : v.toFixed(0)} ${unit}`, left - 6, yy);
    }
    g.textBaseline = 'alphabetic';
    g.textAlign = 'left'; g.fillText(`-${duration(span)}`, left, ht - 4);
    g.textAlign = 'right'; g.fillText('now', w - 4, ht - 4);
    if (vis.length < 2) return;
    g.beginPath();
    vis.forEach((p, i) => (i ? g.lineTo(x(p.t), y(p.v)) : g.moveTo(x(p.t), y(p.v))));
    g.strokeStyle = '#2f6fed'; g.lineWidth = 1.8; g.lineJoin = 'round'; g.stroke();
    g.lineTo(x(vis[vis.length - 1].t), y(0)); g.lineTo(x(vis[0].t), y(0)); g.closePath();
    g.fillStyle = 'rgba(47, 111, 237, .12)'; g.fill();
  };
  return {
    el,
    add(t, v, suffix = '') {
      points.push({ t: t || Date.now(), v: Number(v) || 0 });
      while (points.length > CHART_SECONDS + 5) points.shift();
      value.textContent = `${Number(v).toFixed(1)} ${unit}${suffix}`;
      draw();
    },
  };
}

// ---- command runner -------------------------------------------------------

function commandsTab(id, body, ac) {
  const histKey = 'sandboxd.commands.' + id;
  const input = h('input', { class: 'cmd', id: 'command', placeholder: 'command, e.g. ls -la /tmp', autocomplete: 'off' });
  const cwd = h('input', { id: 'cwd', placeholder: 'working directory', size: 18 });
  const run = h('button', { type: 'submit', id: 'run' }, 'Run');
  const stop = h('button', { type: 'button', class: 'danger', id: 'interrupt', disabled: true }, 'Interrupt');
  const out = h('pre', { class: 'output', id: 'output' });
  const status = h('span', { class: 'exit', id: 'exit' });
  const histList = h('ol', { class: 'history cmdhistory', id: 'command-history' });
  let current = null;

  const loadHistory = () => { try { return JSON.parse(sessionStorage.getItem(histKey) || '[]'); } catch { return []; } };
  const renderHistory = () => {
    const items = loadHistory();
    histList.replaceChildren(...(items.length ? items.map((e) =>
      h('li', { title: 'Click to put it back in the box', onclick: () => { input.value = e.command; input.focus(); } },
        h('span', { class: `exit ${e.exit === 0 ? 'ok' : 'bad'}` }, e.exit === null ? '…' : `[${e.exit}]`), ' ', e.command))
      : [h('li', { class: 'muted' }, 'Nothing run yet in this tab.')]));
  };
  const remember = (command, exit) => {
    const items = [{ command, exit }, ...loadHistory().filter((e) => e.command !== command)].slice(0, 30);
    sessionStorage.setItem(histKey, JSON.stringify(items));
    renderHistory();
  };

  const form = h('form', { class: 'runner' }, input, cwd, run, stop);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const command = input.value.trim();
    if (!command || current) return;
    out.replaceChildren(h('span', { class: 'meta' }, `$ ${command}\n`));
    status.textContent = 'running…';
    status.className = 'exit';
    const cmd = { ac: new AbortController(), execId: null };
    onLeave(() => cmd.ac.abort());
    current = cmd;
    run.disabled = true;
    stop.disabled = false;
    let exit = null;
    const line = (cls, text) => {
      const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.append(h('span', { class: cls }, text + '\n'));
      if (atBottom) out.scrollTop = out.scrollHeight;
    };
    try {
      const req = { command };
      if (cwd.value.trim()) req.cwd = cwd.value.trim();
      const res = await request('POST', execdURL(id, '/command'), { body: req, signal: cmd.ac.signal });
      await readJSONLines(res, (e) => {
        switch (e.type) {
          case 'init': cmd.execId = e.text; break;
          case 'stdout': line('stdout', e.text ?? ''); break;
          case 'stderr': line('stderr', e.text ?? ''); break;
          case 'execution_complete': exit = 0; break;
          case 'error':
            exit = Number.parseInt(e.error && e.error.evalue, 10);
            if (Number.isNaN(exit)) { exit = -1; line('stderr', `${e.error?.ename || 'error'}: ${e.error?.evalue || ''}`); }
            else if (e.error.traceback?.[0]) line('meta', `(${e.error.traceback[0]})`);
            break;
        }
      });
    } catch (e) {
      line('stderr', cmd.ac.signal.aborted ? '(disconnected)' : e.message);
    }
    current = null;
    run.disabled = false;
    stop.disabled = true;
    status.textContent = exit === null ? 'no exit code' : `exit code ${exit}`;
    status.className = `exit ${exit === 0 ? 'ok' : 'bad'}`;
    remember(command, exit);
  });
  stop.addEventListener('click', async () => {
    if (!current) return;
    const c = current;
    stop.disabled = true;
    try {
      if (c.execId) await request('DELETE', execdURL(id, `/command?id=${enc(c.execId)}`));
      else c.ac.abort();
    } catch {
      c.ac.abort(); // closing the stream kills the command too
    }
  });

  body.append(
    h('div', { class: 'card' }, h('h2', {}, 'Run a command'), form,
      h('div', { class: 'spread' }, h('span', { class: 'muted small' }, 'stdout in white, stderr in red; output streams as it comes.'), status),
      out),
    h('div', { class: 'card' }, h('h2', {}, 'History'), histList));
  renderHistory();
  input.focus();
}

// ---- file browser ---------------------------------------------------------

const IMAGE_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml', bmp: 'image/bmp' };
const TEXT_PREVIEW_MAX = 1 << 20;

function filesTab(id, body, ac) {
  let dir = sessionStorage.getItem('sandboxd.dir.' + id) || '/tmp';
  const crumbs = h('div', { class: 'crumbs grow' });
  const pathInput = h('input', { id: 'path', size: 40 });
  const tbody = h('tbody', { id: 'files' });
  const err = h('p', { class: 'error' });
  const preview = h('div', { class: 'preview card', id: 'preview', hidden: true });
  const fileInput = h('input', { type: 'file', id: 'upload', multiple: true });
  const uploadMsg = h('span', { class: 'notice small', id: 'upload-status' });
  let previewURL = null;
  onLeave(() => previewURL && URL.revokeObjectURL(previewURL));

  const join = (d, name) => (d.endsWith('/') ? d : d + '/') + name;
  const base = (p) => p.split('/').filter(Boolean).pop() || '/';
  const parent = (p) => p.replace(/\/[^/]+\/?$/, '') || '/';

  const list = async (to) => {
    try {
      const entries = await getJSON(execdURL(id, `/directories/list?path=${enc(to)}&depth=1`), { signal: ac.signal });
      dir = to;
      sessionStorage.setItem('sandboxd.dir.' + id, dir);
      pathInput.value = dir;
      err.textContent = '';
      entries.sort((a, b) => (a.type === 'directory') === (b.type === 'directory') ? a.path.localeCompare(b.path) : a.type === 'directory' ? -1 : 1);
      const rows = [];
      if (dir !== '/') rows.push(h('tr', {}, h('td', { colspan: 5 }, h('a', { href: '#', onclick: (e) => { e.preventDefault(); list(parent(dir)); } }, '..'))));
      for (const f of entries) {
        const isDir = f.type === 'directory';
        const name = base(f.path);
        rows.push(h('tr', { 'data-path': f.path },
          h('td', { class: 'mono' }, h('a', { href: '#', onclick: (e) => { e.preventDefault(); isDir ? list(f.path) : show(f); } }, isDir ? name + '/' : name)),
          h('td', { class: 'num' }, isDir ? '—' : bytes(f.size)),
          h('td', { class: 'num muted' }, `${String(f.mode).padStart(3, '0')} ${f.owner || ''}`),
          h('td', { class: 'num muted' }, localTime(f.modified_at)),
          h('td', {}, isDir ? '' : h('button', { class: 'ghost small', type: 'button', onclick: () => download(f.path) }, 'Download'))));
      }
      if (!entries.length) rows.push(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Empty directory.')));
      tbody.replaceChildren(...rows);
    } catch (e) {
      if (e.name !== 'AbortError') err.textContent = e.message;
    }
  };

  const fetchBlob = async (p, type) => {
    const res = await request('GET', execdURL(id, `/files/download?path=${enc(p)}`), { signal: ac.signal });
    const b = await res.blob();
    return type ? new Blob([b], { type }) : b;
  };
  const download = async (p) => {
    try {
      // A neutral type: the blob is saved, never rendered in this origin.
      const url = URL.createObjectURL(await fetchBlob(p, 'application/octet-stream'));
      const a = h('a', { href: url, download: base(p) });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) { err.textContent = e.message; }
  };
  const show = async (f) => {
    const ext = (f.path.split('.').pop() || '').toLowerCase();
    preview.hidden = false;
    const headline = h('div', { class: 'spread' }, h('h2', { class: 'mono' }, f.path),
      h('button', { class: 'ghost small', type: 'button', onclick: () => download(f.path) }, 'Download'));
    if (previewURL) { URL.revokeObjectURL(previewURL); previewURL = null; }
    try {
      if (IMAGE_TYPES[ext]) {
        // An <img> never runs script, not even an SVG's.
        previewURL = URL.createObjectURL(await fetchBlob(f.path, IMAGE_TYPES[ext]));
        preview.replaceChildren(headline, h('img', { src: previewURL, alt: f.path, id: 'preview-image' }));
      } else if (f.size <= TEXT_PREVIEW_MAX) {
        const buf = new Uint8Array(await (await fetchBlob(f.path)).arrayBuffer());
        const binary = buf.subarray(0, 8000).includes(0);
        preview.replaceChildren(headline, binary
          ? h('p', { class: 'muted' }, `Binary file (${bytes(f.size)}); download it to look inside.`)
          : h('pre', { id: 'preview-text' }, new TextDecoder().decode(buf)));
      } else {
        preview.replaceChildren(headline, h('p', { class: 'muted' }, `${bytes(f.size)}: too large to preview.`));
      }
    } catch (e) {
      preview.replaceChildren(headline, h('p', { class: 'error' }, e.message));
    }
  };
  const upload = async () => {
    const files = [...fileInput.files];
    if (!files.length) return;
    const form = new FormData();
    for (const f of files) {
      form.append('metadata', new Blob([JSON.stringify({ path: join(dir, f.name) })], { type: 'application/json' }), 'metadata');
      form.append('file', f, f.name);
    }
    uploadMsg.textContent = 'uploading…';
    try {
      await request('POST', execdURL(id, '/files/upload'), { body: form, signal: ac.signal });
      uploadMsg.textContent = `uploaded ${files.map((f) => f.name).join(', ')}`;
      fileInput.value = '';
      await list(dir);
      const first = files[0];
      show({ path: join(dir, first.name), size: first.size });
    } catch (e) {
      uploadMsg.textContent = '';
      err.textContent = e.message;
    }
  };
  fileInput.addEventListener('change', upload);
  pathInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') list(pathInput.value.trim() || '/'); });

  body.append(
    h('div', { class: 'card' },
      h('div', { class: 'spread' }, h('h2', {}, 'Files'),
        h('div', { class: 'row' }, pathInput,
          h('button', { class: 'ghost', type: 'button', onclick: () => list(pathInput.value.trim() || '/') }, 'Go'),
          h('label', { class: 'button' }, 'Upload', fileInput), uploadMsg)),
      crumbs, err,
      h('table', {}, h('thead', {}, h('tr', {}, ['Name', 'Size', 'Mode', 'Modified', ''].map((c) => h('th', {}, c)))), tbody)),
    preview);
  fileInput.hidden = true;
  list(dir);
}

// ---- container log --------------------------------------------------------

function logsTab(id, body, ac) {
  const pre = h('pre', { class: 'logs', id: 'logs' }, 'loading…');
  const tail = h('select', { id: 'tail' }, ['100', '500', '2000', '10000'].map((n) => h('option', { value: n, selected: n === '500' }, `last ${n} lines`)));
  const load = async () => {
    try {
      const res = await request('GET', sandboxURL(id, `/diagnostics/logs?tail=${tail.value}`), { signal: ac.signal });
      const text = await res.text();
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text || '(the container has written nothing)';
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    } catch (e) {
      if (e.name !== 'AbortError') pre.textContent = e.message;
    }
  };
  tail.addEventListener('change', load);
  body.append(h('div', { class: 'card' },
    h('div', { class: 'spread' }, h('h2', {}, 'Container log (stdout and stderr of the main process)'),
      h('div', { class: 'row' }, tail, h('button', { class: 'ghost', type: 'button', onclick: load }, 'Refresh'))),
    pre));
  load();
  every(5000, load);
}

// ---- dialogs --------------------------------------------------------------

// ask shows a modal: with opts.label it returns the typed value (or null),
// otherwise true or false.
function ask(title, text, opts = {}) {
  const dlg = $('dialog');
  $('dialog-title').textContent = title;
  $('dialog-text').textContent = text;
  const input = $('dialog-input');
  $('dialog-label').hidden = !opts.label;
  $('dialog-label-text').textContent = opts.label || '';
  input.value = opts.value || '';
  const ok = $('dialog-ok');
  ok.textContent = opts.ok || 'OK';
  ok.className = opts.danger ? 'danger' : '';
  return new Promise((resolve) => {
    const done = (v) => {
      $('dialog-form').onsubmit = null;
      $('dialog-cancel').onclick = null;
      dlg.onclose = null;
      if (dlg.open) dlg.close();
      resolve(v);
    };
    $('dialog-form').onsubmit = (e) => { e.preventDefault(); done(opts.label ? input.value : true); };
    $('dialog-cancel').onclick = () => done(opts.label ? null : false);
    dlg.onclose = () => done(opts.label ? null : false);
    dlg.showModal();
    (opts.label ? input : ok).focus();
  });
}

// ---- start ----------------------------------------------------------------

async function health() {
  const el = $('health');
  try {
    const res = await fetch('/health', { cache: 'no-store', credentials: 'omit' });
    const body = await res.json();
    el.textContent = res.ok ? 'engine healthy' : `engine ${body.docker || 'unhealthy'}`;
    el.className = res.ok ? 'health' : 'health bad';
  } catch {
    el.textContent = 'server unreachable';
    el.className = 'health bad';
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('signout').addEventListener('click', () => signOut());
  window.addEventListener('hashchange', route);
  route();
  health();
  setInterval(() => { if (session.key()) health(); }, 10000);
});
