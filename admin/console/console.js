// The taskgate console: a small single-page app over the admin JSON API (../api/v1/).
//
// No build step and no third-party code. Every value from the API reaches the page through
// text nodes (textContent, createTextNode), never through HTML parsing, so task data cannot
// inject markup or script; the server's Content-Security-Policy forbids inline script too.
// The bearer token the operator enters lives in sessionStorage (this tab only) and goes only
// to the API in the Authorization header; the API checks it on every request.
(function () {
  'use strict';

  const TOKEN_KEY = 'taskgate.console.token';
  const REFRESH_MS = 5000;
  const STATUSES = ['pending', 'blocked', 'running', 'retrying', 'completed', 'failed', 'canceled'];
  const FINAL = ['completed', 'failed', 'canceled'];
  const TASK_FILTERS = ['type', 'queue', 'status', 'owner', 'business_key', 'parent'];
  const PER_PAGE = ['10', '25', '50', '100'];
  // The API beside the console: .../console/ -> .../api/v1/ (works wherever it is mounted).
  const API = new URL('../api/v1/', window.location.href);

  const $ = (id) => document.getElementById(id);
  let current = null; // { page, refresh } of the view on screen
  let generation = 0; // bumps on navigation: late answers for an old view are dropped
  let busy = false; // a refresh is running
  let again = false; // another refresh was asked for meanwhile
  let carry = null; // a note for the view being opened

  // ---- DOM helpers -------------------------------------------------------------------------

  // el('a', { href: '#/x', class: 'c' }, 'text', child, ...): attributes by setAttribute,
  // strings as text nodes, null/false children skipped.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith('on') && typeof value === 'function') {
        node.addEventListener(name.slice(2), value);
      } else if (value === true) {
        node.setAttribute(name, '');
      } else {
        node.setAttribute(name, String(value));
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function replace(node, ...children) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return append(node, children);
  }

  function link(hash, text) {
    return el('a', { href: hash }, text);
  }

  function taskLink(id) {
    return el('a', { href: '#/task/' + encodeURIComponent(id), class: 'task-id' }, id);
  }

  function badge(status) {
    return el('span', { class: 'badge status-' + status }, status);
  }

  function time(t) {
    if (!t) return '—';
    return String(t).replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function age(ms) {
    if (ms === null || ms === undefined) return '—';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return (s / 3600).toFixed(1) + ' h';
    return (s / 86400).toFixed(1) + ' d';
  }

  function table(cls, headings, rows) {
    return el('table', { class: cls },
      el('thead', null, el('tr', null, headings.map((h) => el('th', null, h)))),
      el('tbody', null, rows));
  }

  function say(text, kind) {
    const status = $('status');
    status.className = kind || '';
    replace(status, text || '');
  }

  // ---- The API -----------------------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    toString() {
      return this.message + ' (' + this.code + ', HTTP ' + this.status + ')';
    }
  }

  function token() {
    return window.sessionStorage.getItem(TOKEN_KEY) || '';
  }

  async function api(method, path, params, body) {
    const secret = token();
    if (!secret) throw new ApiFailure(401, 'console.no_token', 'Enter a token to use the console');
    const url = new URL(path, API);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== '' && v !== null && v !== undefined) url.searchParams.set(k, v);
    }
    const headers = { Authorization: 'Bearer ' + secret, Accept: 'application/json' };
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (e) {
      throw new ApiFailure(0, 'console.unreachable', 'The API did not answer: ' + e.message);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      throw new ApiFailure(response.status, 'console.not_json', 'The API answered no JSON');
    }
    if (!response.ok) {
      throw new ApiFailure(response.status, String(data.code), String(data.message));
    }
    return data;
  }

  const seg = (s) => encodeURIComponent(s);

  // ---- Routing -----------------------------------------------------------------------------

  function parseHash() {
    const hash = window.location.hash.replace(/^#\/?/, '');
    const q = hash.indexOf('?');
    const path = q < 0 ? hash : hash.slice(0, q);
    const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
    const parts = path.split('/');
    if (parts[0] === 'task' && parts.length > 1) {
      return { page: 'task', id: decodeURIComponent(parts.slice(1).join('/')), params };
    }
    if (['queues', 'tasks', 'audit'].includes(parts[0])) return { page: parts[0], params };
    return { page: 'queues', params };
  }

  function navigate() {
    generation += 1;
    // A done action's note belongs to its view, unless it led to this one.
    if ($('status').className === 'ok') say('');
    if (carry) say(carry, 'ok');
    carry = null;
    const route = parseHash();
    for (const name of ['queues', 'tasks', 'audit']) {
      const nav = $('nav-' + name);
      if (nav) nav.classList.toggle('active', route.page === name || (name === 'tasks' && route.page === 'task'));
    }
    const view = $('view');
    const pages = { queues: queuesPage, tasks: tasksPage, task: taskPage, audit: auditPage };
    current = pages[route.page](view, route);
    view.dataset.generation = String(generation); // which navigation built the view
    refresh();
  }

  // Re-reads the current view's data; one refresh at a time (a request meanwhile runs once
  // more after it). Errors show in the status line; the view stays.
  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await refreshOnce();
      } while (again);
    } finally {
      busy = false;
    }
  }

  async function refreshOnce() {
    if (!current) return;
    if (!token()) {
      say('Enter a bearer token above (it is kept in this tab only).', 'info');
      return;
    }
    const mine = generation;
    try {
      await current.refresh(() => mine === generation);
      if (mine === generation) {
        $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
        if ($('status').className === 'error') say('');
      }
    } catch (e) {
      if (mine === generation) say(e instanceof ApiFailure ? e.toString() : String(e), 'error');
    }
  }

  // Runs a mutation, reports it, and re-reads the view.
  async function act(what, method, path, body) {
    try {
      await api(method, path, null, body);
      say(what + ': done.', 'ok');
    } catch (e) {
      // 'refused', not 'error': the refresh below clears only its own errors.
      say(what + ': ' + (e instanceof ApiFailure ? e.toString() : String(e)), 'refused');
    }
    await refresh();
  }

  // ---- Queues ------------------------------------------------------------------------------

  function queuesPage(view) {
    const summary = el('p', { id: 'summary', class: 'summary' });
    const holder = el('div', { id: 'queues' });
    replace(view, el('h2', null, 'Queues'), summary, holder);
    return {
      page: 'queues',
      async refresh(fresh) {
        const list = await api('GET', 'queues');
        let stats = null;
        try {
          stats = await api('GET', 'stats');
        } catch (e) {
          stats = null;
        }
        if (!fresh()) return;
        if (stats) {
          replace(summary, 'Backend ', el('strong', null, stats.backend), ' · ',
            STATUSES.map((s, i) => [i ? ' · ' : '', s + ' ', el('strong', null, String(stats.totals[s] || 0))]));
        }
        if (!list.queues.length) {
          replace(holder, el('p', { class: 'empty' }, 'No queues yet: nothing was enqueued.'));
          return;
        }
        const rows = list.queues.map((q) => el('tr', { 'data-queue': q.name },
          el('td', null, link('#/tasks?queue=' + seg(q.name), q.name)),
          el('td', { class: 'num length' }, String(q.length)),
          STATUSES.map((s) => el('td', { class: 'num count-' + s }, String(q.counts[s] || 0))),
          el('td', null, age(q.oldest_ready_age_ms)),
          el('td', { class: 'state' }, q.paused ? badge('paused') : 'active'),
          el('td', null, el('button', {
            type: 'button',
            class: q.paused ? 'resume-queue' : 'pause-queue',
            onclick: () => act((q.paused ? 'Resume ' : 'Pause ') + q.name, 'POST',
              'queues/' + seg(q.name) + (q.paused ? '/resume' : '/pause')),
          }, q.paused ? 'Resume' : 'Pause'))));
        replace(holder, table('queues', ['Queue', 'Length'].concat(STATUSES,
          ['Oldest ready', 'State', '']), rows));
      },
    };
  }

  // ---- Task list ---------------------------------------------------------------------------

  function tasksPage(view, route) {
    const p = route.params;
    const field = (name, label) => el('label', null, label,
      el('input', { type: 'text', name, value: p.get(name) || '', spellcheck: 'false' }));
    const status = el('select', { name: 'status' }, el('option', { value: '' }, 'any'),
      STATUSES.map((s) => el('option', { value: s, selected: p.get('status') === s }, s)));
    const perPage = p.get('per_page') || '50';
    const size = el('select', { name: 'per_page' },
      PER_PAGE.map((n) => el('option', { value: n, selected: n === perPage }, n)));
    const form = el('form', { id: 'filters', class: 'filters' },
      field('type', 'Type'), field('queue', 'Queue'), el('label', null, 'Status', status),
      field('owner', 'Owner'), field('business_key', 'Business key'), field('parent', 'Parent'),
      el('label', null, 'Per page', size),
      el('button', { type: 'submit', id: 'apply' }, 'Filter'),
      el('a', { href: '#/tasks', class: 'clear' }, 'Clear'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      for (const name of TASK_FILTERS.concat(['per_page'])) {
        const value = form.elements[name].value.trim();
        if (value && !(name === 'per_page' && value === '50')) next.set(name, value);
      }
      go('#/tasks?' + next.toString());
    });
    const holder = el('div', { id: 'tasks' });
    const pager = el('div', { class: 'pager' });
    replace(view, el('h2', null, 'Tasks'), form, holder, pager);
    const page = Math.max(1, parseInt(p.get('page') || '1', 10) || 1);
    return {
      page: 'tasks',
      async refresh(fresh) {
        const params = { page: String(page), per_page: perPage };
        for (const name of TASK_FILTERS) params[name] = p.get(name) || '';
        const data = await api('GET', 'tasks', params);
        if (!fresh()) return;
        if (!data.tasks.length) {
          replace(holder, el('p', { class: 'empty' }, page > 1 ? 'No tasks on this page.' : 'No tasks match.'));
        } else {
          replace(holder, table('tasks', ['ID', 'Type', 'Queue', 'Status', 'Owner', 'Business key',
            'Attempts', 'Progress', 'Created', 'Finished'], data.tasks.map((t) => el('tr', { 'data-id': t.id },
            el('td', null, taskLink(t.id)),
            el('td', null, t.type),
            el('td', null, t.queue),
            el('td', { class: 'status' }, badge(t.status), t.lease_expired
              ? [' ', el('span', { class: 'badge lease-expired', title: t.lease_note }, 'lease expired')] : null),
            el('td', null, t.owner || '—'),
            el('td', null, t.business_key || '—'),
            el('td', { class: 'num' }, t.attempts + ' / ' + t.max_retry),
            el('td', { class: 'num' }, t.progress === null ? '—' : t.progress + '%'),
            el('td', null, time(t.created_at)),
            el('td', null, time(t.finished_at))))));
        }
        const to = (n) => {
          const next = new URLSearchParams(p);
          next.set('page', String(n));
          return '#/tasks?' + next.toString();
        };
        replace(pager,
          el('button', { type: 'button', id: 'prev', disabled: page <= 1, onclick: () => go(to(page - 1)) }, '‹ Previous'),
          el('span', { id: 'page' }, 'Page ' + page),
          el('button', { type: 'button', id: 'next', disabled: !data.has_more, onclick: () => go(to(page + 1)) }, 'Next ›'));
      },
    };
  }

  function go(hash) {
    if (window.location.hash === hash) navigate();
    else window.location.hash = hash;
  }

  // ---- One task ----------------------------------------------------------------------------

  function pretty(value, encoding) {
    if (encoding === null || encoding === undefined) return el('span', { class: 'none' }, 'none');
    const text = encoding === 'json' ? JSON.stringify(value, null, 2) : String(value);
    return el('div', null, encoding === 'base64' ? el('span', { class: 'note' }, 'not JSON; base64:') : null,
      el('pre', null, text));
  }

  // The executions of the task's replay chain, oldest first: its business key's chain, or the
  // walk back through replay_of (a key-less chain's later executions are not findable).
  async function replayChain(task) {
    if (task.business_key) {
      const chain = await api('GET', 'tasks', { business_key: task.business_key, per_page: '100' });
      return chain.tasks;
    }
    const back = [task];
    let at = task;
    while (at.replay_of && back.length < 25) {
      try {
        at = await api('GET', 'tasks/' + seg(at.replay_of));
      } catch (e) {
        back.push({ id: at.replay_of, status: 'gone', created_at: null, replay_of: '' });
        break;
      }
      back.push(at);
    }
    return back.reverse();
  }

  async function parentRows(task) {
    const ids = [...new Set(task.parents)].slice(0, 50);
    const rows = [];
    for (const id of ids) {
      try {
        rows.push(await api('GET', 'tasks/' + seg(id)));
      } catch (e) {
        rows.push({ id, type: '', status: e.status === 404 ? 'gone' : 'unknown', created_at: null });
      }
    }
    return rows;
  }

  function relatives(rows, id, empty) {
    if (!rows.length) return el('p', { class: 'empty' }, empty);
    return table('relatives', ['ID', 'Type', 'Status', 'Created'], rows.map((t) => el('tr', { class: t.id === id ? 'this' : null },
      el('td', null, t.id === id ? el('strong', null, t.id + ' (this)') : taskLink(t.id)),
      el('td', null, t.type || '—'),
      el('td', null, badge(t.status)),
      el('td', null, time(t.created_at)))));
  }

  function taskPage(view, route) {
    const id = route.id;
    const title = el('h2', null, 'Task ', el('span', { id: 'task-id' }, id), ' ', el('span', { id: 'task-status' }));
    const buttons = {
      cancel: el('button', { type: 'button', id: 'cancel', disabled: true }, 'Cancel'),
      resume: el('button', { type: 'button', id: 'resume', disabled: true }, 'Resume'),
      replay: el('button', { type: 'button', id: 'replay', disabled: true }, 'Replay'),
    };
    let task = null;
    buttons.cancel.addEventListener('click', () => {
      if (task && window.confirm('Cancel task ' + id + '?')) act('Cancel ' + id, 'POST', 'tasks/' + seg(id) + '/cancel');
    });
    buttons.resume.addEventListener('click', () => {
      if (task && window.confirm('Resume task ' + id + '?')) act('Resume ' + id, 'POST', 'tasks/' + seg(id) + '/resume');
    });
    buttons.replay.addEventListener('click', async () => {
      if (!task || !window.confirm('Replay task ' + id + ' as a new execution?')) return;
      try {
        const made = await api('POST', 'tasks/' + seg(id) + '/replay', null, { allow_completed: true });
        carry = 'Replay ' + id + ': new execution ' + made.id + '.';
        go('#/task/' + seg(made.id));
      } catch (e) {
        say('Replay ' + id + ': ' + (e instanceof ApiFailure ? e.toString() : String(e)), 'refused');
      }
    });
    const details = el('dl', { id: 'details', class: 'details' });
    const steps = el('div', { id: 'steps' });
    const data = el('div', { id: 'data', class: 'data' });
    const chain = el('div', { id: 'chain' });
    const parents = el('div', { id: 'parents' });
    const children = el('div', { id: 'children' });
    replace(view, title, el('div', { class: 'actions' }, buttons.cancel, buttons.resume, buttons.replay),
      el('div', { class: 'task-grid' },
        el('section', null, el('h3', null, 'Details'), details),
        el('section', null, el('h3', null, 'Steps'), steps, data)),
      el('div', { class: 'family' },
        el('section', null, el('h3', null, 'History: replay chain'), chain),
        el('section', null, el('h3', null, 'Parents'), parents),
        el('section', null, el('h3', null, 'Children'), children)));
    return {
      page: 'task',
      async refresh(fresh) {
        const t = await api('GET', 'tasks/' + seg(id));
        const [history, ups, downs] = await Promise.all([
          replayChain(t),
          parentRows(t),
          api('GET', 'tasks', { parent: id, per_page: '100' }),
        ]);
        if (!fresh()) return;
        task = t;
        replace($('task-status'), badge(t.status));
        buttons.cancel.disabled = FINAL.includes(t.status) || t.cancel_requested;
        buttons.resume.disabled = !(t.status === 'failed' || t.status === 'canceled');
        buttons.replay.disabled = !FINAL.includes(t.status);
        const row = (label, value) => [el('dt', null, label), el('dd', null, value)];
        replace(details,
          row('Type', t.type), row('Queue', t.queue), row('Status', badge(t.status)),
          row('Owner', t.owner || '—'), row('Business key', t.business_key || '—'),
          row('Replay of', t.replay_of ? taskLink(t.replay_of) : '—'),
          row('Attempts', t.attempts + ' of ' + t.max_retry + ' retries'),
          row('Lease lost / throttled', t.lease_lost + ' / ' + t.throttled),
          row('Resumes', String(t.resumes)),
          row('Cancel requested', t.cancel_requested ? 'yes' : 'no'),
          row('Lease', t.lease_expires_at ? el('span', { id: 'lease', class: t.lease_expired ? 'lease-expired' : '' },
            time(t.lease_expires_at) + ' — ' + t.lease_note) : '—'),
          row('Last heartbeat', t.status !== 'running' ? '—' : el('span', { id: 'heartbeat' },
            t.last_heartbeat_at ? time(t.last_heartbeat_at) : 'none since the claim')),
          row('On parent failure', t.on_parent_failure),
          row('Run at', time(t.run_at)), row('Created', time(t.created_at)),
          row('Started', time(t.started_at)), row('Finished', time(t.finished_at)),
          row('Last error', t.last_error ? el('code', { id: 'last-error' }, t.last_error) : '—'));
        replace(steps,
          el('p', null, 'Saved steps: ', el('strong', { id: 'step-count' }, String(t.steps))),
          t.progress === null ? el('p', { class: 'none' }, 'No progress reported.')
            : el('p', null, el('progress', { id: 'progress', max: '100', value: String(t.progress) }),
              ' ', el('span', { id: 'progress-text' }, t.progress + '%')),
          t.message ? el('p', { id: 'step-message' }, t.message) : null,
          el('h4', null, 'Cursor'), pretty(t.cursor, t.cursor_encoding));
        replace(data,
          el('div', null, el('h3', null, 'Payload'), pretty(t.payload, t.payload_encoding)),
          el('div', null, el('h3', null, 'Result'), pretty(t.result, t.result_encoding)));
        replace(chain, relatives(history, id, 'No replays.'));
        replace(parents, relatives(ups, id, 'No parents.'));
        replace(children, relatives(downs.tasks, id, 'No children.'),
          downs.has_more ? link('#/tasks?parent=' + seg(id), 'All children…') : null);
      },
    };
  }

  // ---- Audit -------------------------------------------------------------------------------

  function auditPage(view, route) {
    const page = Math.max(1, parseInt(route.params.get('page') || '1', 10) || 1);
    const holder = el('div', { id: 'audit' });
    const pager = el('div', { class: 'pager' });
    replace(view, el('h2', null, 'Audit log'), holder, pager);
    return {
      page: 'audit',
      async refresh(fresh) {
        const data = await api('GET', 'audit', { page: String(page), per_page: '50' });
        if (!fresh()) return;
        const target = (t) => t.startsWith('task:') ? taskLink(t.slice(5)) : t;
        replace(holder, data.records.length ? table('audit', ['When', 'Who', 'Action', 'Target', 'Outcome', 'Detail'],
          data.records.map((r) => el('tr', null,
            el('td', null, time(r.at)), el('td', null, r.actor), el('td', null, r.action),
            el('td', null, target(r.target)),
            el('td', null, r.outcome === 'ok' ? 'ok' : el('span', { class: 'badge status-failed' }, r.outcome)),
            el('td', null, r.detail || '')))) : el('p', { class: 'empty' }, 'No audit records.'));
        replace(pager,
          el('button', { type: 'button', disabled: page <= 1, onclick: () => go('#/audit?page=' + (page - 1)) }, '‹ Newer'),
          el('span', null, 'Page ' + page),
          el('button', { type: 'button', disabled: !data.has_more, onclick: () => go('#/audit?page=' + (page + 1)) }, 'Older ›'));
      },
    };
  }

  // ---- Start -------------------------------------------------------------------------------

  function showTokenState() {
    $('token-state').textContent = token() ? 'token set (this tab)' : 'no token';
  }

  function start() {
    $('token-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const input = $('token');
      const value = input.value.trim();
      input.value = '';
      if (value) window.sessionStorage.setItem(TOKEN_KEY, value);
      showTokenState();
      say('');
      navigate();
    });
    $('token-forget').addEventListener('click', () => {
      window.sessionStorage.removeItem(TOKEN_KEY);
      showTokenState();
      navigate();
    });
    window.addEventListener('hashchange', navigate);
    window.setInterval(() => {
      if ($('auto-refresh').checked && !document.hidden) refresh();
    }, REFRESH_MS);
    showTokenState();
    navigate();
  }

  start();
})();
