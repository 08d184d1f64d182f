// EMQ's dashboard. Plain JavaScript, no build: it calls the admin API
// (broker/admin.go) with the session cookie, and keeps the numbers live
// from /api/v1/overview/stream (one Overview a second) and a job's page
// from /api/v1/events?msgid=. Nothing from the broker is put in the page
// as HTML: el() makes every element and sets text.
'use strict';

const app = {
  role: '',          // "full", "read" or "" (logged out)
  auth: false,       // the broker wants a token
  overview: null,    // the last Overview
  prev: null,        // the one before, for rates
  rates: {},         // queue name -> {acked, replied, failed} a second
  series: [],        // [{t, received, acked, replied, failed}], the chart's
  stream: null,      // EventSource of overviews
  chart: null,
  onTick: null,      // the page's handler of a new Overview
  cleanup: [],       // the page's streams and timers to end when it goes
};
window.emq = app; // for tests and the curious

const SERIES = [
  ['received', 'Received', '#1f77b4'],
  ['acked', 'Acknowledged', '#2ca02c'],
  ['replied', 'Replied', '#9467bd'],
  ['failed', 'Failed', '#d62728'],
];
const KEEP_POINTS = 300; // five minutes of one a second
const JOB_EVENTS = ['acked', 'dispatched', 'replied', 'failed', 'timed_out', 'worker_lost', 'retry',
  'requeued', 'buried', 'revived', 'removed', 'purged', 'cancelled', 'progress', 'waiting', 'released'];
// HIDDEN_HOW says what shows payloads to a login that may not see them.
const HIDDEN_HOW = () => (app.auth ? 'Log in with the full admin token to see it.'
  : 'This broker hides payloads (--admin-show-payloads=false).');
// The states of a job that a cancel takes (pending includes delayed).
const CANCELLABLE = ['pending', 'inflight', 'waiting'];

// el makes an element: attrs are properties (class, href, onclick, ...)
// or, for names with a dash, attributes; children are nodes or text.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k.includes('-') || k === 'role' || k === 'for') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}
const $ = (sel) => document.querySelector(sel);
const canChange = () => app.role === 'full';

function toast(msg) {
  const t = $('#toast');
  t.textContent = msg;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.textContent = ''; }, 4000);
}

// api calls the admin API; a change carries the header no other site's
// page can send. A 401 goes back to the login page.
async function api(method, path, body) {
  const init = { method, headers: {}, credentials: 'same-origin' };
  if (method !== 'GET') init.headers['X-EMQ-Admin'] = 'dashboard';
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const data = await r.json().catch(() => ({}));
  if (r.status === 401) {
    app.role = '';
    showLogin('Your session ended; log in again.');
    throw new Error('login needed');
  }
  if (!r.ok) {
    const err = new Error(data.error || r.status + ' ' + r.statusText);
    err.status = r.status;
    throw err;
  }
  return data;
}

// act runs a change and says how it went.
async function act(what, fn) {
  try {
    const msg = await fn();
    toast(msg || what + ': done');
  } catch (e) {
    toast(what + ' failed: ' + e.message);
  }
}

// ---- formatting ----

const num = (n) => (n === undefined || n === null) ? '–' : Number(n).toLocaleString('en-US');
function rate(r) {
  if (!r) return '0';
  return r >= 100 ? Math.round(r).toLocaleString('en-US') : r.toFixed(1).replace(/\.0$/, '');
}
function dur(s) {
  if (s === undefined || s === null || s <= 0) return '–';
  if (s < 1) return (s * 1000).toFixed(0) + ' ms';
  if (s < 60) return s.toFixed(0) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + Math.floor(s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor(s % 3600 / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor(s % 86400 / 3600) + 'h';
}
function ago(iso) {
  if (!iso) return '–';
  const s = (Date.now() - Date.parse(iso)) / 1000;
  return s >= 0 ? dur(Math.max(s, 1)) + ' ago' : 'in ' + dur(-s);
}
const when = (iso) => iso ? new Date(iso).toLocaleString() : '–';
function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}
const stat = (o, name) => (o && o.stats && o.stats[name]) || 0;
const enc = encodeURIComponent;

function table(headers, rows, empty) {
  const head = el('tr', null, headers.map((h) => {
    const [text, cls] = Array.isArray(h) ? h : [h];
    return el('th', { class: cls, scope: 'col' }, text);
  }));
  const body = el('tbody');
  if (rows.length === 0) body.append(el('tr', null, el('td', { class: 'muted', colSpan: headers.length }, empty || 'None.')));
  else body.append(...rows);
  return el('div', { class: 'scroll' }, el('table', null, el('thead', null, head), body));
}
const td = (v, cls) => el('td', { class: cls }, v);
const tdn = (v) => el('td', { class: 'num' }, v);

// confirmInline asks in the page (no dialog box) before a change. Its
// "No" is not called Cancel: cancelling a job is one of the changes.
function confirmInline(where, question, label, fn) {
  where.replaceChildren(el('span', { class: 'confirm', role: 'alert' }, question,
    el('button', { type: 'button', class: 'danger', 'data-confirm': 'yes', onclick: async () => { where.replaceChildren(); await fn(); } }, label),
    el('button', { type: 'button', 'data-dismiss': 'yes', onclick: () => where.replaceChildren() }, 'No')));
  where.querySelector('[data-confirm]').focus();
}

// ---- session ----

async function start() {
  const r = await fetch('/ui/session', { credentials: 'same-origin' });
  const s = await r.json();
  app.auth = s.auth;
  app.role = s.role;
  if (!app.role) { showLogin(); return; }
  showApp();
}

function showLogin(message) {
  endPage();
  if (app.stream) { app.stream.close(); app.stream = null; }
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#who').textContent = '';
  const err = el('p', { class: 'err', id: 'login-error', role: 'alert' }, message || '');
  const input = el('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'current-password', required: true });
  const form = el('form', { class: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    const r = await fetch('/ui/login', { method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: input.value }) });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) { err.textContent = data.error || 'Login failed.'; input.select(); return; }
    app.role = data.role;
    showApp();
  } },
  el('h1', null, 'Log in'),
  el('p', { class: 'muted' }, 'This broker wants its admin token (or its read-only token).'),
  el('label', { for: 'token' }, 'Admin token', input),
  el('p', null, el('button', { type: 'submit', class: 'primary', id: 'login' }, 'Log in')),
  err);
  $('#main').replaceChildren(form);
  input.focus();
}

function showApp() {
  $('#nav').hidden = false;
  $('#who').textContent = app.role === 'read' ? 'read-only' : (app.auth ? 'logged in' : 'open (no token set)');
  $('#logout').hidden = !app.auth;
  openStream();
  route();
}

$('#logout').addEventListener('click', async () => {
  await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-EMQ-Admin': 'dashboard' } });
  app.role = '';
  showLogin('Logged out.');
});

// openStream follows the broker's overview, one a second.
function openStream() {
  if (app.stream) return;
  const es = new EventSource('/api/v1/overview/stream');
  app.stream = es;
  es.addEventListener('overview', (ev) => tick(JSON.parse(ev.data)));
  es.addEventListener('error', async () => {
    if (es.readyState !== EventSource.CLOSED) return; // it retries by itself
    app.stream = null;
    const s = await fetch('/ui/session', { credentials: 'same-origin' }).then((r) => r.json()).catch(() => null);
    if (s && !s.role) { app.role = ''; showLogin('Your session ended; log in again.'); return; }
    setTimeout(openStream, 3000);
  });
}

// A page left (or kept in the back/forward cache) holds no stream: a
// browser opens at most six connections to one host.
window.addEventListener('pagehide', () => {
  endPage();
  if (app.stream) { app.stream.close(); app.stream = null; }
});
window.addEventListener('pageshow', (ev) => { if (ev.persisted && app.role) showApp(); });

const shardOf = (o) => (o && o.stats && o.stats.group && o.stats.group.shard) || '';

function tick(o) {
  const prev = app.overview;
  app.overview = o;
  $('#nav-shards').hidden = !shardOf(o);
  if (prev) {
    const dt = (Date.parse(o.time) - Date.parse(prev.time)) / 1000;
    if (dt > 0) {
      const point = { t: Date.parse(o.time) };
      for (const [name] of SERIES) point[name] = Math.max(0, stat(o, name) - stat(prev, name)) / dt;
      app.series.push(point);
      if (app.series.length > KEEP_POINTS) app.series.shift();
      const before = Object.fromEntries(prev.queues.map((q) => [q.name, q]));
      app.rates = {};
      for (const q of o.queues) {
        const p = before[q.name] || { acked_total: 0, replied_total: 0, failed_total: 0 };
        const d = (k) => { const x = q[k] - p[k]; return (x >= 0 ? x : q[k]) / dt; };
        app.rates[q.name] = { acked: d('acked_total'), replied: d('replied_total'), failed: d('failed_total') };
      }
      drawChart();
    }
  }
  if (app.onTick) app.onTick(o);
}

// ---- pages ----

function endPage() {
  for (const f of app.cleanup) f();
  app.cleanup = [];
  app.onTick = null;
  if (app.chart) { app.chart.destroy(); app.chart = null; }
}

function route() {
  if (!app.role) return;
  endPage();
  const hash = location.hash.startsWith('#/') ? location.hash : '#/';
  let parts;
  try {
    parts = hash.slice(2).split('/').map(decodeURIComponent);
  } catch {
    parts = [''];
  }
  for (const a of document.querySelectorAll('#nav a')) {
    const page = a.getAttribute('href').slice(2);
    a.toggleAttribute('aria-current', false);
    if (page === parts[0] || (page === '' && parts[0] === '')) a.setAttribute('aria-current', 'page');
  }
  const pages = { '': overviewPage, queue: queuePage, job: jobPage, dead: deadPage, workers: workersPage, schedules: schedulesPage,
    batches: batchesPage, batch: batchPage, shards: shardsPage };
  const page = pages[parts[0]] || overviewPage;
  $('#main').replaceChildren();
  page(parts[1]);
}
window.addEventListener('hashchange', () => { if (location.hash === '#main') return; route(); });

function overviewPage() {
  document.title = 'EMQ · Overview';
  const cards = el('div', { class: 'cards', id: 'cards' });
  const rekey = el('section', { id: 'rekey', 'aria-label': 'Journal rekey' });
  const canvas = el('canvas', { id: 'chart', 'aria-label': 'Jobs a second: received, acknowledged, replied, failed', role: 'img' });
  const queues = el('div', { id: 'queues' });
  $('#main').append(el('h1', null, 'Overview'), cards, rekey,
    el('h2', null, 'Jobs a second'), el('div', { class: 'chart' }, canvas),
    el('h2', null, 'Queues'), queues);
  makeChart(canvas);
  const render = (o) => {
    cards.replaceChildren(...[
      ['Role', o.role + (o.ready ? '' : ' (not ready)')],
      ...(shardOf(o) ? [['Shard', shardOf(o)]] : []),
      ['Workers', num(o.workers)], ['Schedulers', num(o.schedulers)],
      ['Received', num(stat(o, 'received'))], ['Acknowledged', num(stat(o, 'acked'))],
      ['Replied', num(stat(o, 'replied'))], ['Failed', num(stat(o, 'failed'))],
      ['Dead-lettered', num(stat(o, 'dead_lettered'))], ['Cancelled', num(stat(o, 'cancelled'))],
    ].map(([k, v]) => el('div', { class: 'card', 'data-stat': k }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v))));
    rekey.replaceChildren(...rekeyView(o.stats && o.stats.rekey));
    const rows = o.queues.map((q) => {
      const r = app.rates[q.name] || {};
      return el('tr', { 'data-queue': q.name },
        td(el('a', { href: '#/queue/' + enc(q.name) }, q.name)),
        tdn(num(q.pending)), tdn(num(q.delayed)), tdn(num(q.in_flight)), tdn(num(q.dead)), tdn(num(q.done)),
        td(q.paused ? el('span', { class: 'paused' }, 'paused') : 'running'), td(limits(q)),
        tdn(dur(q.oldest_age_seconds)), tdn(rate(r.acked)), tdn(rate(r.replied)), tdn(rate(r.failed)));
    });
    queues.replaceChildren(table(['Queue', ['Pending', 'num'], ['Delayed', 'num'], ['In flight', 'num'], ['Dead', 'num'],
      ['Done', 'num'], 'State', 'Limits', ['Oldest', 'num'], ['Acked/s', 'num'], ['Replied/s', 'num'], ['Failed/s', 'num']],
    rows, 'No queues yet: send a job.'));
  };
  app.onTick = render;
  if (app.overview) render(app.overview);
  else { // the first numbers with the page, not after the stream's first
    api('GET', '/api/v1/overview').then((o) => { if (!app.overview) tick(o); }).catch(() => {});
  }
}

// rekeyView shows the journal's rekey (emq journal rekey), when one runs
// or ran: the key it seals under, how far its pass is, what it sealed
// and has left, its pace; once ended, the keys the journal no longer
// needs. Nothing when none ran.
function rekeyView(r) {
  if (!r || !r.key) return [];
  const pct = r.total > 0 ? Math.min(100, Math.floor(r.scanned * 100 / r.total)) : 0;
  let state = 'stopped: it goes on when the journal opens for writing';
  if (r.running) state = 'sealing again, pass ' + num(r.pass || 1) + (r.bucket ? ', ' + r.bucket : '');
  else if (r.finished) state = 'finished ' + ago(r.finished);
  const f = [['Key', r.key], ['State', state]];
  if (r.running) {
    f.push(['Looked at', el('span', { id: 'rekey-progress', 'data-percent': String(pct) },
      el('progress', { max: 100, value: pct }), ' ', pct + '% (' + num(r.scanned) + ' of ' + num(r.total) + ')')]);
  }
  f.push(['Sealed again', num(r.resealed)], ['Left', num(r.left)], ['Rate', 'at most ' + num(r.rate) + ' a second'],
    ['Started', when(r.started)]);
  if (r.finished) {
    f.push(['Finished', when(r.finished)],
      ['No longer needed', r.dropped && r.dropped.length ? r.dropped.join(', ') + ' (may go from the key file; a backup taken before still needs it)' : 'none']);
  }
  if (r.error) f.push(['Last error', el('span', { class: 'err' }, r.error)]);
  return [el('h2', null, 'Journal rekey'),
    el('dl', { class: 'fields' }, f.map(([k, v]) => [el('dt', null, k), el('dd', { 'data-rekey': k }, v)]))];
}

function limits(q) {
  const parts = [];
  if (q.concurrency) parts.push('≤ ' + q.concurrency + ' in flight');
  if (q.rate) parts.push(q.rate + '/s' + (q.burst ? ' burst ' + q.burst : ''));
  return parts.length ? parts.join(', ') : 'none';
}

// tenantDefaults are the limits of each tenant of queue q that has none
// of its own.
function tenantDefaults(q) {
  return limits({ concurrency: q.tenant_concurrency, rate: q.tenant_rate, burst: q.tenant_burst });
}
const TENANTS_SHOWN = 20;

function makeChart(canvas) {
  if (!window.Chart) return;
  const dark = matchMedia('(prefers-color-scheme: dark)').matches;
  const grid = dark ? '#333a44' : '#e3e6ea';
  const text = dark ? '#9aa4b2' : '#5b6470';
  app.chart = new Chart(canvas, {
    type: 'line',
    data: {
      labels: [],
      datasets: SERIES.map(([, label, color]) => ({ label, data: [], borderColor: color, backgroundColor: color,
        borderWidth: 2, pointRadius: 0, tension: 0.2 })),
    },
    options: {
      animation: false, maintainAspectRatio: false, responsive: true,
      interaction: { mode: 'index', intersect: false },
      scales: {
        x: { ticks: { color: text, maxTicksLimit: 6, maxRotation: 0 }, grid: { color: grid } },
        y: { beginAtZero: true, ticks: { color: text }, grid: { color: grid } },
      },
      plugins: { legend: { labels: { color: text } } },
    },
  });
  drawChart();
}

function drawChart() {
  const c = app.chart;
  if (!c) return;
  c.data.labels = app.series.map((p) => new Date(p.t).toLocaleTimeString());
  SERIES.forEach(([name], i) => { c.data.datasets[i].data = app.series.map((p) => Math.round(p[name] * 10) / 10); });
  c.update('none');
}

// jobList is a searchable, paged list of jobs with bulk actions; fixed
// holds the filters the page sets (queue, state).
function jobList(fixed, opts) {
  const wrap = el('div', { class: 'jobs' });
  const fields = [['msgid_prefix', 'Msgid starts with'], ['header', 'Headers contain'], ['error', 'Error contains'],
    ['older_than', 'Older than (e.g. 1h)'], ['newer_than', 'Newer than (e.g. 10m)']];
  if (opts.queueField) fields.unshift(['queue', 'Queue']);
  const inputs = {};
  const form = el('form', { class: 'row', role: 'search', onsubmit: (ev) => { ev.preventDefault(); load(false); } },
    fields.map(([k, label]) => el('label', null, label, inputs[k] = el('input', { name: k, type: 'search' }))),
    el('button', { type: 'submit' }, 'Search'));
  const bulk = el('div', { class: 'row', id: 'bulk' });
  const ask = el('div', { class: 'row' });
  const list = el('div');
  const more = el('div', { class: 'row' });
  let next = '';
  let rows = [];
  let applied = ''; // the filters of the list shown: what paging and bulk actions use
  let seq = 0;      // of the latest load: an older answer is dropped
  wrap.append(form, bulk, ask, list, more);

  const filters = () => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(fixed())) if (v) q.set(k, v);
    for (const [k, input] of Object.entries(inputs)) if (input.value.trim()) q.set(k, input.value.trim());
    return q.toString();
  };
  const withExtra = (base, extra) => {
    const q = new URLSearchParams(base);
    for (const [k, v] of Object.entries(extra)) q.set(k, v);
    return q.toString();
  };
  async function load(append) {
    const want = append ? applied : filters();
    if (!append) ask.replaceChildren(); // a question asked about another list
    const mine = ++seq;
    let page;
    try {
      page = await api('GET', '/api/v1/jobs?' + withExtra(want, { limit: 50, after: append ? next : '' }));
    } catch (e) {
      if (mine === seq) {
        list.replaceChildren(el('p', { class: 'err', role: 'alert' }, e.message));
        bulk.replaceChildren(); // no list on the screen to act on
      }
      return;
    }
    if (mine !== seq) return;
    applied = want; // the filters of the list now drawn
    if (!append) rows = [];
    rows.push(...(page.jobs || []).map((j) => jobRow(j, opts, () => load(false))));
    next = page.next || '';
    list.replaceChildren(table(opts.headers, rows, 'No jobs match.'));
    more.replaceChildren(next ? el('button', { type: 'button', id: 'more', onclick: () => load(true) }, 'Next page') : '');
    drawBulk();
  }
  function drawBulk() {
    bulk.replaceChildren();
    if (!canChange()) return;
    const st = fixed().state;
    const bulkAct = (verb, path) => el('button', { type: 'button', class: verb === 'Retry' ? '' : 'danger', 'data-bulk': verb.toLowerCase(),
      onclick: async () => {
        const these = applied; // the list on the screen, whatever is typed since
        let res;
        try { res = await api('POST', path + '?' + these); } catch (e) { toast(e.message); return; }
        if (res.matched === 0) { toast('No jobs match.'); return; }
        const what = st === 'inflight' ? 'in-flight' : st;
        let note = '';
        if (verb === 'Delete' && st === 'pending') note = ' (Jobs in flight are left alone.)';
        if (verb === 'Cancel') note = st === 'pending' ? ' (Delayed ones and those in flight too: their workers are told to stop.)' : ' (Their workers are told to stop.)';
        confirmInline(ask, verb + ' ' + num(res.matched) + ' ' + what + ' job' + (res.matched === 1 ? '' : 's') + ' matching this search?' + note,
        verb + ' ' + num(res.matched), () => act(verb, async () => {
          const done = await api('POST', path + '?' + withExtra(these, { confirm: 'yes' }));
          await load(false);
          return verb + ': ' + num(done.done) + ' of ' + num(done.matched);
        }));
      } }, verb + ' all matching');
    if (st === 'dead') bulk.append(bulkAct('Retry', '/api/v1/dead/retry'));
    if (CANCELLABLE.includes(st)) bulk.append(bulkAct('Cancel', '/api/v1/jobs/cancel'));
    if (['dead', 'pending', 'done', 'cancelled'].includes(st)) bulk.append(bulkAct('Delete', '/api/v1/jobs/remove'));
  }
  return { el: wrap, load };
}

function jobRow(j, opts, reload) {
  const buttons = el('td');
  if (canChange()) {
    const ask = el('span');
    if (j.state === 'dead') {
      buttons.append(el('button', { type: 'button', 'data-action': 'retry', 'aria-label': 'Retry ' + j.msgid,
        onclick: () => act('Retry', async () => { await api('POST', '/api/v1/jobs/' + enc(j.msgid) + '/retry'); reload(); return 'Sent back to ' + j.queue; }) }, 'Retry'), ' ');
    }
    if (CANCELLABLE.includes(j.state)) {
      buttons.append(el('button', { type: 'button', class: 'danger', 'data-action': 'cancel', 'aria-label': 'Cancel ' + j.msgid,
        onclick: () => confirmInline(ask, 'Cancel this job?', 'Cancel job', () => act('Cancel', async () => {
          await api('POST', '/api/v1/jobs/' + enc(j.msgid) + '/cancel'); reload(); return 'Cancelled ' + j.msgid;
        })) }, 'Cancel'), ' ');
    }
    buttons.append(el('button', { type: 'button', class: 'danger', 'data-action': 'delete', 'aria-label': 'Delete ' + j.msgid,
      onclick: () => confirmInline(ask, 'Delete this job?', 'Delete', () => act('Delete', async () => {
        await api('DELETE', '/api/v1/jobs/' + enc(j.msgid)); reload(); return 'Deleted ' + j.msgid;
      })) }, 'Delete'), ask);
  }
  const cells = {
    msgid: td(el('a', { href: '#/job/' + enc(j.msgid) }, j.msgid)),
    queue: td(el('a', { href: '#/queue/' + enc(j.queue) }, j.queue)),
    state: td(j.state),
    priority: tdn(j.priority === undefined ? '–' : String(j.priority)),
    age: tdn(ago(j.enqueued)),
    attempts: tdn(num(j.attempts)),
    error: td(j.last_error || '', 'wrap err'),
    size: tdn(bytes(j.payload_size)),
    preview: j.payload_hidden ? td('hidden', 'muted payload-hidden') : td(j.preview.slice(0, 80), 'wrap muted'),
  };
  return el('tr', { 'data-msgid': j.msgid }, opts.columns.map((c) => cells[c]), buttons);
}

function queuePage(name) {
  document.title = 'EMQ · ' + name;
  const numbers = el('div', { class: 'cards', id: 'numbers' });
  const controls = el('div', { class: 'row', id: 'controls' });
  let stateNow = 'pending';
  const tabs = el('div', { class: 'row', role: 'group', 'aria-label': 'Jobs by state' });
  const list = jobList(() => ({ queue: name, state: stateNow }), {
    // The journal keeps jobs in flight as pending: the pending tab shows
    // them too, with their state.
    columns: ['msgid', 'state', 'priority', 'age', 'attempts', 'error', 'size', 'preview'],
    headers: ['Msgid', 'State', ['Priority', 'num'], ['Age', 'num'], ['Attempts', 'num'], 'Last error', ['Size', 'num'], 'Payload', ''],
  });
  for (const st of ['pending', 'inflight', 'waiting', 'dead', 'done', 'cancelled']) {
    tabs.append(el('button', { type: 'button', 'data-state': st, 'aria-pressed': String(st === stateNow), onclick: (ev) => {
      stateNow = st;
      for (const b of tabs.children) b.setAttribute('aria-pressed', String(b === ev.currentTarget));
      list.load(false);
    } }, st === 'inflight' ? 'in flight' : st));
  }
  const tenants = el('div', { id: 'tenants' });
  $('#main').append(el('p', null, el('a', { href: '#/' }, '← Overview')), el('h1', null, 'Queue ', name),
    numbers, controls, el('h2', null, 'Tenants'), tenants, el('h2', null, 'Jobs'), tabs, list.el);
  // Its tenants, the largest backlog first: the first page, every 5 s.
  let tenantTicks = 0;
  const loadTenants = async () => {
    let p;
    try {
      p = await api('GET', '/api/v1/queues/' + enc(name) + '/tenants?limit=' + TENANTS_SHOWN);
    } catch (e) {
      tenants.replaceChildren(el('p', { class: 'err' }, e.message));
      return;
    }
    const rows = (p.tenants || []).map((t) => el('tr', { 'data-tenant': t.name },
      td(t.name === '' ? el('span', { class: 'muted' }, '(no tenant)') : t.name), tdn(num(t.pending)), tdn(num(t.in_flight)),
      td(limits(t)), tdn(num(t.weight)), td(t.blocked ? el('span', { class: 'paused' }, 'at its limit') : '')));
    tenants.replaceChildren(table(['Tenant', ['Pending', 'num'], ['In flight', 'num'], 'Limits', ['Weight', 'num'], 'Blocked'],
      rows, 'No tenants: no jobs, no settings.'),
    p.total > rows.length ? el('p', { class: 'muted' }, rows.length + ' of ' + num(p.total) + ' tenants (emq tenants ls ' + name + ' for the rest)') : '');
  };

  const render = (o) => {
    const q = (o.queues || []).find((x) => x.name === name) || { name, pending: 0, delayed: 0, in_flight: 0, dead: 0, done: 0, workers: 0 };
    const r = app.rates[name] || {};
    numbers.replaceChildren(...[
      ['Pending', num(q.pending)], ['Delayed', num(q.delayed)], ['In flight', num(q.in_flight)], ['Dead', num(q.dead)],
      ['Done', num(q.done)], ['Workers', num(q.workers)], ['Oldest', dur(q.oldest_age_seconds)],
      ['State', q.paused ? 'paused' : 'running'], ['Limits', limits(q)], ['Each tenant', tenantDefaults(q)],
      ['Acked/s', rate(r.acked)], ['Replied/s', rate(r.replied)], ['Failed/s', rate(r.failed)],
    ].map(([k, v]) => el('div', { class: 'card', 'data-stat': k }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v))));
    if (tenantTicks++ % 5 === 0) loadTenants();
    if (!canChange()) return;
    if (q.paused !== paused) { // the button follows the broker
      paused = q.paused;
      pauseButton.textContent = paused ? 'Resume' : 'Pause';
      pauseButton.className = paused ? 'primary' : '';
    }
    const lim = JSON.stringify([q.concurrency, q.rate, q.burst]);
    if (lim !== drawnLimits && !limitsForm.contains(document.activeElement)) { // not while typed in
      drawnLimits = lim;
      conc.value = q.concurrency || 0;
      rt.value = q.rate || 0;
      burst.value = q.burst || 0;
    }
  };
  let paused = null;
  let drawnLimits = null;
  const pauseButton = el('button', { type: 'button', id: 'pause', onclick: () => {
    const resume = paused;
    act(resume ? 'Resume' : 'Pause', async () => {
      await api('POST', '/api/v1/queues/' + enc(name) + (resume ? '/resume' : '/pause'));
      return (resume ? 'Resumed ' : 'Paused ') + name;
    });
  } }, 'Pause');
  const conc = el('input', { type: 'number', min: 0, step: 1, name: 'concurrency' });
  const rt = el('input', { type: 'number', min: 0, step: 'any', name: 'rate' });
  const burst = el('input', { type: 'number', min: 0, step: 1, name: 'burst' });
  const limitsForm = el('form', { class: 'row', id: 'limits', onsubmit: (ev) => {
    ev.preventDefault();
    document.activeElement.blur();
    act('Limits', async () => {
      await api('POST', '/api/v1/queues/' + enc(name) + '/settings',
        { concurrency: Number(conc.value), rate: Number(rt.value), burst: Number(burst.value) });
      return 'Limits of ' + name + ' saved';
    });
  } }, el('label', null, 'Concurrency (0 = none)', conc), el('label', null, 'Rate a second (0 = none)', rt),
  el('label', null, 'Burst', burst), el('button', { type: 'submit' }, 'Save limits'));
  if (canChange()) controls.append(pauseButton, limitsForm);
  app.onTick = render;
  if (app.overview) render(app.overview);
  list.load(false);
}

async function jobPage(id) {
  document.title = 'EMQ · job ' + id;
  const main = $('#main');
  const actions = el('div', { class: 'row', id: 'actions' });
  const body = el('div');
  const why = el('p', { id: 'why', class: 'why' });
  main.append(el('h1', null, 'Job ', el('span', { class: 'muted' }, id)), why, actions, body);
  let pending = false;
  let drawn = ''; // the state the buttons are for: redrawn when it changes, so a question asked stays
  const load = async () => {
    let j;
    try {
      j = await api('GET', '/api/v1/jobs/' + enc(id));
    } catch (e) {
      drawn = '';
      actions.replaceChildren();
      body.replaceChildren(el('p', { class: 'err', role: 'alert' }, e.status === 404 ? 'No such job: replied and deleted, expired, cancelled or removed.' : e.message));
      return;
    }
    api('GET', '/api/v1/jobs/' + enc(id) + '/why').then((w) => {
      why.replaceChildren(w.sentence);
      why.dataset.reason = w.reason;
    }, () => { why.replaceChildren(); });
    if (j.state !== drawn) {
      drawn = j.state;
      actions.replaceChildren(...jobActions(j, load));
    }
    body.replaceChildren(...jobView(j));
  };
  // Its events, live; reloads at most once a second.
  const es = new EventSource('/api/v1/events?msgid=' + enc(id));
  let timer = null;
  const again = () => {
    if (pending) return;
    pending = true;
    timer = setTimeout(() => { pending = false; load(); }, 1000);
  };
  for (const k of JOB_EVENTS) es.addEventListener(k, again);
  // A job in flight also every 2 s: the broker announces at most ten
  // progress reports a second, so the last one may come unannounced.
  let n = 0;
  app.onTick = () => { if (drawn === 'inflight' && ++n % 2 === 0) again(); };
  app.cleanup.push(() => { es.close(); clearTimeout(timer); });
  await load();
}

// jobActions are the buttons for what may be done to job j now.
function jobActions(j, reload) {
  if (!canChange()) return [];
  const out = [];
  const ask = el('span');
  const path = '/api/v1/jobs/' + enc(j.msgid);
  if (j.state === 'dead') {
    out.push(el('button', { type: 'button', 'data-action': 'retry', onclick: () => act('Retry', async () => {
      await api('POST', path + '/retry'); reload(); return 'Sent back to ' + j.queue;
    }) }, 'Retry'));
  }
  if (CANCELLABLE.includes(j.state)) {
    const question = j.state === 'inflight' ? 'Cancel this job? Its worker is told to stop, and it never runs again.' : 'Cancel this job? It never runs.';
    out.push(el('button', { type: 'button', class: 'danger', 'data-action': 'cancel', onclick: () => confirmInline(ask, question, 'Cancel job',
      () => act('Cancel', async () => { await api('POST', path + '/cancel'); reload(); return 'Cancelled'; })) }, 'Cancel job'));
  }
  out.push(el('button', { type: 'button', class: 'danger', 'data-action': 'delete', onclick: () => confirmInline(ask, 'Delete this job?', 'Delete',
    () => act('Delete', async () => { await api('DELETE', path); location.hash = '#/queue/' + enc(j.queue); return 'Deleted'; })) }, 'Delete'), ask);
  return out;
}

// progressView is a worker's latest report: a bar and its percent when
// it gave one, its note, and how long ago.
function progressView(p) {
  if (!p) return 'none reported';
  const parts = [];
  if (p.percent >= 0) parts.push(el('progress', { max: 100, value: p.percent }), ' ', p.percent + '%');
  if (p.note) parts.push(' ', el('span', { class: 'note' }, p.note));
  parts.push(el('span', { class: 'muted' }, ' (' + ago(p.time) + ')'));
  return el('span', { id: 'progress', 'data-percent': String(p.percent) }, parts);
}

function jobView(j) {
  const out = [];
  const unique = !j.unique ? '–' : j.unique_for_seconds ? j.unique + ' (held ' + dur(j.unique_for_seconds) + ' after it is done)' : j.unique;
  const f = [['Queue', el('a', { href: '#/queue/' + enc(j.queue) }, j.queue)], ['State', j.state], ['Worker', j.worker || '–'],
    ['Priority', j.priority === undefined ? '–' : String(j.priority)], ['Unique key', unique]];
  if (j.state === 'inflight') f.push(['Progress', progressView(j.progress)]);
  f.push(['Enqueued', when(j.enqueued) + ' (' + ago(j.enqueued) + ')'], ['Failed attempts', num(j.attempts)],
    ['Last error', j.last_error || '–'], ['Not before', j.not_before ? when(j.not_before) : '–'],
    ['Finished', j.finished ? when(j.finished) : '–'], ['Headers', j.headers || '–']);
  out.push(el('dl', { class: 'fields', id: 'fields' }, f.map(([k, v]) => [el('dt', null, k), el('dd', { 'data-field': k }, v)])));
  const flow = workflowView(j);
  if (flow) out.push(el('h2', null, 'Workflow'), flow);
  if (j.payload_hidden) {
    // This login may see sizes, not payloads or results (docs/security.md).
    out.push(el('h2', null, 'Payload'), el('p', { id: 'payload-hidden', class: 'muted' },
      'Payload hidden (size ' + bytes(j.payload_size) + '). ' + HIDDEN_HOW()));
    if (j.state === 'done') out.push(el('h2', null, 'Result'), el('p', { id: 'result', class: 'muted' }, 'Result hidden.'));
  } else {
    out.push(el('h2', null, 'Payload ', el('span', { class: 'muted' }, bytes(j.payload_size))),
      el('pre', { id: 'preview' }, j.preview + (j.payload_size > j.preview.length ? ' …' : '')),
      el('a', { href: '/api/v1/jobs/' + enc(j.msgid) + '/payload', download: j.msgid + '.payload', id: 'download' }, 'Download the whole payload'));
  }
  if (j.state === 'done' && !j.payload_hidden) {
    const res = el('div', { id: 'result' }, el('p', { class: 'muted' }, 'Loading…'));
    out.push(el('h2', null, 'Result'), res);
    fetch('/api/v1/jobs/' + enc(j.msgid) + '/result', { credentials: 'same-origin' }).then(async (r) => {
      if (!r.ok) { res.replaceChildren(el('p', { class: 'muted' }, 'No result kept.')); return; }
      const buf = new Uint8Array(await r.arrayBuffer());
      const text = new TextDecoder('utf-8', { fatal: false }).decode(buf.slice(0, 200));
      res.replaceChildren(el('p', { class: 'muted' }, bytes(buf.length)), el('pre', null, text + (buf.length > 200 ? ' …' : '')),
        el('a', { href: '/api/v1/jobs/' + enc(j.msgid) + '/result', download: j.msgid + '.result' }, 'Download the result'));
    });
  }
  const trail = (j.trail || []).map((e) => el('tr', null, td(when(e.time)), td(e.kind), tdn(e.attempt ? num(e.attempt) : ''),
    td(e.worker || ''), td(e.reason || '', 'wrap')));
  out.push(el('h2', null, 'History'), table(['Time', 'What', ['Attempt', 'num'], 'Worker', 'Why'], trail));
  return out;
}

// workflowView draws a job between what it waits for and what waits for
// it: parents (with their states) and the batch it waits for on the
// left, the job with its batch and its rule in the middle, the jobs that
// wait for it on the right; null for a job of no workflow.
function workflowView(j) {
  const parents = j.after || [];
  const children = j.children || [];
  if (!parents.length && !children.length && !j.batch && !j.after_batch) return null;
  const node = (href, label, state) => el('li', null, el('a', { href }, label), state ? el('span', { class: 'state-' + state }, ' ' + state) : '');
  const left = el('ul', { class: 'flow-col', id: 'parents', 'aria-label': 'Waits for' },
    parents.map((p) => node('#/job/' + enc(p.msgid), p.msgid, p.state || 'done (not kept)')),
    j.after_batch ? node('#/batch/' + enc(j.after_batch), 'batch ' + j.after_batch, '') : []);
  if (!left.children.length) left.append(el('li', { class: 'muted' }, 'nothing'));
  const middle = el('div', { class: 'flow-col flow-self' }, el('strong', null, j.state),
    j.batch ? el('div', null, 'in batch ', el('a', { href: '#/batch/' + enc(j.batch), id: 'batch-link' }, j.batch)) : '',
    j.state === 'waiting' ? el('div', null, 'waits for ' + num(j.waits) + ' more') : '',
    j.after_failed ? el('div', { class: 'muted' }, 'if one fails: ' + j.after_failed) : '');
  const right = el('ul', { class: 'flow-col', id: 'children', 'aria-label': 'Waited for by' },
    children.map((c) => node('#/job/' + enc(c), c, '')));
  if (!right.children.length) right.append(el('li', { class: 'muted' }, 'nothing'));
  return el('div', { class: 'flow', id: 'workflow' }, el('div', null, el('div', { class: 'muted' }, 'Waits for'), left),
    el('div', { class: 'flow-arrow', 'aria-hidden': 'true' }, '→'), middle, el('div', { class: 'flow-arrow', 'aria-hidden': 'true' }, '→'),
    el('div', null, el('div', { class: 'muted' }, 'Waited for by'), right));
}

// batchBar is a batch's progress: what ended (done, dead, cancelled,
// removed) of all its jobs.
function batchBar(b) {
  const ended = b.done + b.dead + b.cancelled + b.removed;
  const all = ended + b.waiting + b.pending;
  return el('span', null, el('progress', { max: all || 1, value: ended, 'data-batch': b.name }), ' ', num(ended) + ' of ' + num(all));
}

function batchesPage() {
  document.title = 'EMQ · Batches';
  const box = el('div', { id: 'batches' });
  $('#main').append(el('h1', null, 'Batches'),
    el('p', { class: 'muted' }, 'Jobs sent with batch:NAME. A job with after-batch:NAME runs once its batch is complete: closed, nothing of it waiting or pending.'), box);
  let n = 0;
  const load = async () => {
    let p;
    try { p = await api('GET', '/api/v1/batches?limit=1000'); } catch (e) { box.replaceChildren(el('p', { class: 'err' }, e.message)); return; }
    const rows = (p.batches || []).map((b) => el('tr', { 'data-batch': b.name }, td(el('a', { href: '#/batch/' + enc(b.name) }, b.name)),
      td(b.state), td(batchBar(b)), tdn(num(b.waiting)), tdn(num(b.pending)), tdn(num(b.done)), tdn(num(b.dead)), tdn(num(b.cancelled)),
      tdn(num(b.waiters)), tdn(ago(b.created))));
    box.replaceChildren(table(['Batch', 'State', 'Progress', ['Waiting', 'num'], ['Pending', 'num'], ['Done', 'num'], ['Dead', 'num'],
      ['Cancelled', 'num'], ['Waiters', 'num'], ['Created', 'num']], rows, 'No batches. Send jobs with the header batch:NAME.'));
  };
  app.onTick = () => { if (++n % 2 === 0) load(); };
  load();
}

function batchPage(name) {
  document.title = 'EMQ · batch ' + name;
  const numbers = el('div', { class: 'cards', id: 'numbers' });
  const actions = el('div', { class: 'row', id: 'actions' });
  const list = jobList(() => ({ header: 'batch:' + name }), {
    queueField: true,
    columns: ['queue', 'msgid', 'state', 'age', 'attempts', 'error', 'size'],
    headers: ['Queue', 'Msgid', 'State', ['Age', 'num'], ['Attempts', 'num'], 'Last error', ['Size', 'num'], ''],
  });
  $('#main').append(el('p', null, el('a', { href: '#/batches' }, '← Batches')), el('h1', null, 'Batch ', name), numbers, actions,
    el('h2', null, 'Its jobs waiting, pending and dead'), list.el);
  let drawn = null;
  let n = 0;
  const load = async () => {
    let b;
    try { b = await api('GET', '/api/v1/batches/' + enc(name)); } catch (e) {
      numbers.replaceChildren(el('p', { class: 'err', role: 'alert' }, e.status === 404 ? 'No such batch.' : e.message));
      return;
    }
    numbers.replaceChildren(...[['State', b.state], ['Progress', batchBar(b)], ['Waiting', num(b.waiting)], ['Pending', num(b.pending)],
      ['In flight', num(b.inflight)], ['Done', num(b.done)], ['Dead', num(b.dead)], ['Cancelled', num(b.cancelled)],
      ['Removed', num(b.removed)], ['Waiters', num(b.waiters)]]
      .map(([k, v]) => el('div', { class: 'card', 'data-stat': k }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v))));
    if (canChange() && drawn !== b.open) {
      drawn = b.open;
      const verb = b.open ? 'close' : 'open';
      actions.replaceChildren(el('button', { type: 'button', 'data-action': verb, onclick: () => act(b.open ? 'Close' : 'Open', async () => {
        await api('POST', '/api/v1/batches/' + enc(name) + '/' + verb); load();
        return (b.open ? 'Closed ' : 'Opened ') + name;
      }) }, b.open ? 'Close batch' : 'Open batch'));
    }
  };
  app.onTick = () => { if (++n % 2 === 0) { load(); list.load(false); } };
  load();
  list.load(false);
}

function deadPage() {
  document.title = 'EMQ · Dead letters';
  const list = jobList(() => ({ state: 'dead' }), {
    queueField: true,
    columns: ['queue', 'msgid', 'error', 'age', 'attempts', 'priority', 'size'],
    headers: ['Queue', 'Msgid', 'Reason', ['Age', 'num'], ['Attempts', 'num'], ['Priority', 'num'], ['Size', 'num'], ''],
  });
  $('#main').append(el('h1', null, 'Dead letters'),
    el('p', { class: 'muted' }, 'Jobs out of attempts. Retry sends one back to its queue with its attempts reset; delete removes it for good.'),
    list.el);
  list.load(false);
}

function workersPage() {
  document.title = 'EMQ · Workers';
  const box = el('div', { id: 'workers' });
  $('#main').append(el('h1', null, 'Workers'), box);
  let n = 0;
  const load = async () => {
    let ws;
    try { ws = await api('GET', '/api/v1/workers'); } catch (e) { box.replaceChildren(el('p', { class: 'err' }, e.message)); return; }
    const rows = (ws || []).map((w) => el('tr', { 'data-worker': w.id }, td(w.id), td(w.endpoint),
      td(w.queues.map((q, i) => q + ' (' + (w.weights ? w.weights[i] : '') + ')').join(', '), 'wrap'),
      tdn(num(w.free_slots + w.in_flight)), tdn(num(w.free_slots)), tdn(num(w.in_flight)), tdn(ago(w.last_heartbeat))));
    box.replaceChildren(table(['Worker', 'Endpoint', 'Queues (weight)', ['Slots', 'num'], ['Free', 'num'], ['In flight', 'num'], ['Last heard', 'num']],
      rows, 'No workers connected.'));
  };
  app.onTick = () => { if (++n % 2 === 0) load(); };
  load();
}

function shardsPage() {
  document.title = 'EMQ · Shards';
  const box = el('div', { id: 'shards' });
  $('#main').append(el('h1', null, 'Shards'),
    el('p', { class: 'muted' }, 'The groups queues are spread over: each serves the queues placed on it, and the others by a hash of their names over the hashed shards.'), box);
  let n = 0;
  const load = async () => {
    let v;
    try { v = await api('GET', '/api/v1/shards'); } catch (e) { box.replaceChildren(el('p', { class: 'err' }, e.message)); return; }
    const rows = v.shards.map((s) => el('tr', { 'data-shard': s.name },
      td(s.name === v.shard ? el('strong', null, s.name + ' (this one)') : s.name),
      td(s.leader || el('span', { class: 'err' }, 'none'), s.error ? 'err' : ''), td(s.hashed ? 'yes' : 'no'),
      td(s.queues.length ? s.queues.map((q, i) => [i ? ', ' : '', s.name === v.shard ? el('a', { href: '#/queue/' + enc(q) }, q) : q]).flat() : '–', 'wrap'),
      td(s.frontend.join(', '), 'wrap'), td(s.backend.join(', '), 'wrap'), td(s.prefix)));
    const moves = Object.entries(v.moving || {}).map(([q, m]) => el('li', { 'data-move': q },
      'Queue ', el('strong', null, q), ' moving from ', m.from, ' to ', m.to, m.copied ? ' (copied; the source forgets its copy)' : ' (copying)'));
    box.replaceChildren(el('p', null, 'Placement version ', el('strong', { id: 'placement-version' }, String(v.version))),
      table(['Shard', 'Leader', 'Hashed', 'Queues placed', 'Frontend', 'Backend', 'Journal prefix'], rows, 'No shards.'),
      moves.length ? el('ul', { id: 'moves' }, moves) : '');
  };
  app.onTick = () => { if (++n % 5 === 0) load(); };
  load();
}

function schedulesPage() {
  document.title = 'EMQ · Schedules';
  const box = el('div', { id: 'schedules' });
  const ask = el('div', { class: 'row' });
  $('#main').append(el('h1', null, 'Schedules'), el('p', { class: 'muted' }, 'Kept by the broker: each makes a job in its queue when due.'), ask, box);
  let n = 0;
  const load = async () => {
    let all = [];
    let after = '';
    try {
      do { // at most 10 pages of 1,000
        const p = await api('GET', '/api/v1/schedules?limit=1000&after=' + enc(after));
        all = all.concat(p.schedules || []);
        after = p.next || '';
      } while (after && all.length < 10000);
    } catch (e) { box.replaceChildren(el('p', { class: 'err' }, e.message)); return; }
    const rows = all.map((s) => {
      const b = el('td');
      if (canChange()) {
        b.append(el('button', { type: 'button', 'data-action': s.paused ? 'resume' : 'pause', onclick: () => act(s.paused ? 'Resume' : 'Pause', async () => {
          await api('POST', '/api/v1/schedules/' + enc(s.id) + (s.paused ? '/resume' : '/pause')); load();
          return (s.paused ? 'Resumed ' : 'Paused ') + s.id;
        }) }, s.paused ? 'Resume' : 'Pause'), ' ',
        el('button', { type: 'button', class: 'danger', 'data-action': 'remove', onclick: () => confirmInline(ask, 'Remove schedule ' + s.id + '?', 'Remove',
          () => act('Remove', async () => { await api('DELETE', '/api/v1/schedules/' + enc(s.id)); load(); return 'Removed ' + s.id; })) }, 'Remove'));
      }
      return el('tr', { 'data-schedule': s.id }, td(s.id), td(el('a', { href: '#/queue/' + enc(s.queue) }, s.queue)),
        td(s.every ? 'every ' + s.every : s.cron), td(s.paused ? el('span', { class: 'paused' }, 'paused') : ago(s.next)),
        td(ago(s.last_fire)), tdn(num(s.fires)), tdn(s.left < 0 ? '∞' : num(s.left)), s.payload_hidden ? td('hidden', 'muted payload-hidden') : td(s.preview.slice(0, 60), 'wrap muted'), b);
    });
    box.replaceChildren(table(['Id', 'Queue', 'When', 'Next due', 'Last fire', ['Fires', 'num'], ['Left', 'num'], 'Payload', ''],
      rows, 'No schedules. Add one with emq schedules add.'));
  };
  app.onTick = () => { if (++n % 5 === 0) load(); };
  load();
}

start().catch((e) => { $('#main').replaceChildren(el('p', { class: 'err', role: 'alert' }, 'Cannot reach the broker: ' + e.message)); });
