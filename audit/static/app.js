// mempo view: a single page over the viewer's JSON API. Every string from the run
// (model output above all) is inserted as a text node; no HTML string is ever parsed.
'use strict';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');

// el builds an element: attrs are set as properties (on*, className, href…) or, for
// data-* and title, as attributes; children are nodes or strings (text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'className' || k === 'value' || k === 'checked' || k === 'open' || k === 'type') e[k] = v;
    else e.setAttribute(k, String(v));
  }
  append(e, ...children);
  return e;
}

function append(e, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

function fmt(x, d = 3) {
  if (x === undefined || x === null) return '';
  if (typeof x !== 'number') return String(x);
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toFixed(d);
}

// link builds a hash link to a view with query parameters.
function href(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return '#/' + view + (s ? '?' + s : '');
}
function link(text, view, params) { return el('a', { href: href(view, params) }, text); }

async function api(path, params) {
  const q = new URLSearchParams(params || {}).toString();
  const res = await fetch('/api/' + path + (q ? '?' + q : ''));
  let body;
  try { body = await res.json(); } catch (e) { throw new Error(res.status + ' ' + res.statusText); }
  if (!res.ok) throw new Error(body && body.error ? body.error : res.status + ' ' + res.statusText);
  return body;
}

function showError(err) {
  clear(main);
  append(main, [el('h1', {}, 'Cannot show this page'), el('pre', { className: 'err' }, String(err.message || err)), link('back to the run', '')]);
}

function setCrumbs(...parts) {
  clear(crumbs);
  append(crumbs, parts.map(p => (typeof p === 'string' ? el('span', { className: 'muted' }, p) : p)));
}

function table(header, rows) {
  return el('table', {}, el('thead', {}, el('tr', {}, header.map(h => el('th', {}, h)))),
    el('tbody', {}, rows.map(r => el('tr', {}, r.map(c => (c instanceof Node && c.tagName === 'TD') ? c : el('td', {}, c))))));
}
function num(x, d) { return el('td', { className: 'num' }, fmt(x, d)); }

// --- overview ---------------------------------------------------------------------

const FIGURES = ['rollouts.answered_frac', 'rollouts.turns_mean', 'rollouts.tt_mean', 'rollouts.pt_mean', 'rollouts.invalid_turns',
  'logprobs.p_mem_mean', 'logprobs.p_full_mean', 'logprobs.auc_p_mem_all_vs_none', 'advantages.mem_reward_mean',
  'advantages.zero_spread_group_frac', 'policy.kl', 'policy.loss'];

async function overview() {
  setCrumbs();
  const o = await api('run');
  clear(main);
  append(main, el('h1', {}, 'Run ', el('code', {}, o.run)));
  const series = new Map();
  for (const g of o.groups || []) {
    if (!series.has(g.series)) series.set(g.series, []);
    series.get(g.series).push(g);
  }
  append(main, el('h2', {}, 'Iterations and groups'));
  if (!series.size) append(main, el('p', { className: 'muted' }, 'No rollouts dataset in this run.'));
  for (const [name, gs] of series) {
    const figs = FIGURES.filter(f => gs.some(g => g.figures && f in g.figures));
    const rows = gs.map(g => [
      el('td', {}, link(g.path, 'questions', { group: g.path })),
      num(g.iter || ''),
      el('td', {}, Object.keys(g.datasets).join(', ')),
      ...figs.map(f => num(g.figures ? g.figures[f] : undefined)),
      el('td', {}, el('details', {}, el('summary', {}, 'all'), el('pre', {}, JSON.stringify(g.figures || {}, null, 1)))),
    ]);
    const rewardCells = gs.map(() => el('td', { className: 'num muted' }, '…'));
    rows.forEach((r, i) => r.splice(2, 0, rewardCells[i]));
    append(main, el('h3', {}, name), table(['group', 'iter', 'mean reward', 'datasets', ...figs, 'figures'], rows));
    // The mean reward comes from the scores datasets, read after the page is shown.
    api('rewards', { series: name }).then(rs => {
      for (const r of rs) {
        const cell = rewardCells[gs.findIndex(g => g.path === r.group)];
        if (!cell) continue;
        cell.textContent = r.error ? 'unreadable' : fmt(r.mean_reward) + ' (ok ' + fmt(r.format_ok_frac, 2) + ')';
        if (r.error) { cell.className = 'err'; cell.setAttribute('title', r.error); }
      }
    }).catch(() => {});
  }
  for (const r of o.eval || []) {
    append(main, el('h2', {}, 'Evaluation ', el('code', {}, r.path)));
    for (const t of r.tables) append(main, table(t.header, t.rows));
    for (const n of r.notes) append(main, el('p', { className: 'muted' }, n));
  }
  append(main, el('h2', {}, 'Datasets'), table(['path', 'kind', 'rows', 'shards', 'digest', 'stage', 'created', 'state'],
    (o.datasets || []).map(d => [el('td', {}, link(d.path, 'dataset', { path: d.path })), d.kind || '', num(d.rows), num(d.shards),
      el('td', { className: 'mono', title: d.digest || '' }, (d.digest || '').slice(0, 12)), d.stage || '', (d.created || '').slice(0, 19),
      el('td', { className: d.error ? 'err' : 'muted' }, d.error || 'ok')])));
  append(main, el('h2', {}, 'Checkpoints'), table(['path', 'stage', 'digest', 'files', 'MB', 'step', 'iteration', 'state'],
    (o.checkpoints || []).map(c => [el('td', {}, c.path), c.stage || '', el('td', { className: 'mono', title: c.digest || '' }, (c.digest || '').slice(0, 12)),
      num(c.files), num(c.bytes / 1e6, 1), num(c.step || ''), num(c.iteration || ''), el('td', { className: c.error ? 'err' : 'muted' }, c.error || 'ok')])));
}

async function datasetPage(p) {
  setCrumbs(link('run', ''), p.get('path') || '');
  const d = await api('dataset', { path: p.get('path') || '' });
  clear(main);
  append(main, el('h1', {}, d.path), table(['kind', 'schema', 'stage', 'rows', 'shards', 'seed', 'digest', 'created'],
    [[d.kind, num(d.schema_version), d.stage, num(d.rows), num(d.shards), num(d.seed), el('td', { className: 'mono' }, d.digest), d.created]]));
  append(main, el('h2', {}, 'Inputs'), table(['name', 'path', 'digest'], (d.inputs || []).map(i => [i.name, i.path, el('td', { className: 'mono' }, i.digest)])));
  append(main, el('h2', {}, 'Metrics'), table(['name', 'value'], Object.entries(d.metrics || {}).sort().map(([k, v]) => [k, num(v, 4)])));
  const t = d.timings || {};
  append(main, el('h2', {}, 'Timings'), table(['what', 'seconds'], [['total', num(t.total_s, 1)]].concat(
    Object.entries(t.phases || {}).sort().map(([k, v]) => [k, num(v, 1)]))));
  append(main, el('h2', {}, 'Config'), el('pre', {}, JSON.stringify(d.config, null, 2)));
}

// --- question list ------------------------------------------------------------------

async function questionsPage(p) {
  const group = p.get('group') || '';
  setCrumbs(link('run', ''), group);
  const filters = { group, q: p.get('q') || '', min: p.get('min') || '', max: p.get('max') || '', invalid: p.get('invalid') || '' };
  const qs = await api('questions', filters);
  const run = await api('run');
  const g = (run.groups || []).find(x => x.path === group);
  clear(main);
  const text = el('input', { type: 'text', value: filters.q, placeholder: 'uid, question or answer' });
  const min = el('input', { type: 'text', className: 'num', value: filters.min, placeholder: 'min' });
  const max = el('input', { type: 'text', className: 'num', value: filters.max, placeholder: 'max' });
  const inv = el('input', { type: 'checkbox', checked: filters.invalid === '1' });
  const go = () => { location.hash = href('questions', { group, q: text.value, min: min.value, max: max.value, invalid: inv.checked ? '1' : '' }); };
  const form = el('form', { className: 'filters', onsubmit: e => { e.preventDefault(); go(); } },
    el('label', {}, 'search ', text), el('label', {}, 'mean reward ', min, ' – ', max), el('label', {}, inv, ' with an invalid-format trajectory'),
    el('button', { type: 'submit' }, 'filter'));
  append(main, el('h1', {}, 'Questions of ', el('code', {}, group)), form,
    el('p', { className: 'muted' }, qs.length + ' questions'),
    table(['uid', 'question', 'samples', 'mean reward', 'max reward', 'invalid', g ? 'compare' : ''], qs.map(q => [
      el('td', { className: 'mono' }, link(q.uid, 'question', { group, uid: q.uid })), q.question || '', num(q.samples), num(q.mean_reward), num(q.max_reward),
      num(q.invalid), el('td', {}, g ? [link('iterations', 'compare', { series: g.series, uid: q.uid }), ' · ',
        link('variants', 'compare', { series: '*', uid: q.uid })] : '')])));
}

// --- one question -------------------------------------------------------------------

// highlight returns nodes of text with every case-insensitive occurrence of a gold
// alias wrapped in <mark>; text stays text.
function highlight(text, golds) {
  const aliases = (golds || []).flat().map(a => a.trim().toLowerCase()).filter(a => a.length > 0);
  if (!text || !aliases.length) return [text || ''];
  const lower = text.toLowerCase();
  const out = [];
  let i = 0;
  while (i < text.length) {
    let best = -1, len = 0;
    for (const a of aliases) {
      const j = lower.indexOf(a, i);
      if (j >= 0 && (best < 0 || j < best || (j === best && a.length > len))) { best = j; len = a.length; }
    }
    if (best < 0) break;
    if (best > i) out.push(text.slice(i, best));
    out.push(el('mark', {}, text.slice(best, best + len)));
    i = best + len;
  }
  if (i < text.length) out.push(text.slice(i));
  return out;
}

function goldsBlock(golds, hits) {
  if (!golds || !golds.length) return el('span', { className: 'muted' }, 'golds unknown (prompts dataset not reachable)');
  return el('span', {}, golds.map((a, k) => el('span', { className: 'gold' + (hits && hits.includes(k) ? ' hit' : ''), title: 'objective ' + (k + 1) },
    (k + 1) + ': ' + a.join(' | '))));
}

function scoreLine(s) {
  if (!s) return el('div', { className: 'muted' }, 'no score');
  return el('div', {}, el('span', { className: 'badge ' + (s.reward > 0 ? 'pos' : 'neg') }, 'reward ' + fmt(s.reward)),
    el('span', { className: 'badge ' + (s.format_ok ? '' : 'invalid') }, s.format_ok ? 'format ok' : 'invalid format'),
    el('span', { className: 'figs' }, 'EM ' + (s.em || []).join(',') + ' · F1 ' + (s.f1 || []).map(x => fmt(x, 2)).join(',') +
      ' · turns ' + s.turns + ' · TT ' + s.tt + ' · PT ' + s.pt),
    el('div', {}, el('span', { className: 'label' }, 'answer'), el('code', {}, s.answer)));
}

function turnCard(group, uid, sample, t, golds, target) {
  const figs = [];
  const add = (name, v, d) => { if (v !== undefined && v !== null) figs.push(name + ' ' + fmt(v, d)); };
  add('P_mem', t.p_mem, 4); add('P_full', t.p_full, 4); add('P_ctx', t.p_ctx, 4); add('mem reward', t.mem_reward); add('A_mem', t.adv_memory); add('A_out', t.adv_outcome);
  if (t.mem_golds !== undefined && t.mem_golds !== null) figs.push('golds held ' + t.mem_golds + '/' + t.objectives);
  const id = 's' + sample + 't' + t.turn;
  return el('div', { className: 'turn' + (target === sample + '.' + t.turn ? ' target' : ''), id },
    el('div', {}, el('span', { className: 'label' }, 'turn ' + t.turn), el('span', { className: 'badge ' + t.action }, t.action),
      t.finish !== 'stop' ? el('span', { className: 'badge' }, t.finish) : null,
      el('span', { className: 'figs' }, t.tokens + ' tokens · context ' + t.prompt_tokens),
      ' ', link('tokens', 'tokens', { group, uid, sample, turn: t.turn })),
    el('div', {}, el('span', { className: 'label' }, 'memory'), t.memory ? el('span', {}, highlight(t.memory, golds)) : el('span', { className: 'muted' }, '(none)'),
      t.golds_in_memory && t.golds_in_memory.length ? el('span', { className: 'figs' }, ' holds objective ' + t.golds_in_memory.map(k => k + 1).join(',')) : null),
    figs.length ? el('div', { className: 'figs' }, figs.join(' · ')) : null,
    el('div', {}, el('span', { className: 'label' }, t.action === 'answer' ? 'answer' : 'query'), el('code', {}, t.query)),
    el('details', {}, el('summary', {}, 'observation (' + t.observation.length + ' chars)'), el('pre', {}, t.observation)),
    el('details', { open: target === sample + '.' + t.turn }, el('summary', {}, 'response'), el('pre', {}, t.response)));
}

async function questionPage(p) {
  const group = p.get('group') || '', uid = p.get('uid') || '', target = p.get('turn') || '';
  setCrumbs(link('run', ''), link(group, 'questions', { group }), uid);
  const q = await api('question', { group, uid });
  clear(main);
  append(main, el('h1', {}, 'Question ', el('code', {}, uid), ' in ', el('code', {}, group)),
    el('p', {}, q.question || el('span', { className: 'muted' }, 'question text unknown')),
    el('div', {}, el('span', { className: 'label' }, 'golds'), goldsBlock(q.golds)));
  if (q.missing && q.missing.length) append(main, el('details', {}, el('summary', { className: 'err' }, 'missing: ' + q.missing.length), q.missing.map(m => el('pre', { className: 'err' }, m))));
  const grid = el('div', { className: 'grid' }, q.trajectories.map(tr => el('div', { className: 'col' },
    el('div', { className: 'head' }, 'sample ' + tr.sample, scoreLine(tr.score)),
    tr.turns.map(t => turnCard(group, uid, tr.sample, t, q.golds, target)))));
  append(main, el('h2', {}, q.trajectories.length + ' trajectories'), grid);
  if (target) { const e = document.getElementById('s' + target.replace('.', 't')); if (e) e.scrollIntoView({ block: 'center' }); }
}

// --- tokens -------------------------------------------------------------------------

function color(v, scale) {
  if (v === undefined || v === null || !scale) return '';
  const x = Math.max(-1, Math.min(1, v / scale));
  const mix = (a, b) => Math.round(255 + (a - 255) * Math.abs(x));
  return x >= 0 ? `rgb(${mix(230)},${mix(70)},${mix(60)})` : `rgb(${mix(60)},${mix(110)},${mix(230)})`;
}

async function tokensPage(p) {
  const group = p.get('group') || '', uid = p.get('uid') || '', sample = p.get('sample') || '0', turn = p.get('turn') || '0';
  const by = p.get('by') || 'advantage';
  setCrumbs(link('run', ''), link(group, 'questions', { group }), link(uid, 'question', { group, uid, turn: sample + '.' + turn }), 'sample ' + sample + ' turn ' + turn);
  const t = await api('tokens', { group, uid, sample, turn });
  const value = tok => by === 'advantage' ? tok.advantage : by === 'old-ref' ? (tok.old != null && tok.ref != null ? tok.old - tok.ref : null) : tok.sampling;
  const vals = t.tokens.map(value).filter(v => v !== undefined && v !== null);
  const scale = vals.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  clear(main);
  const pick = el('select', { onchange: e => { location.hash = href('tokens', { group, uid, sample, turn, by: e.target.value }); } },
    ['advantage', 'old-ref', 'sampling'].map(o => el('option', { value: o, selected: o === by }, o === 'old-ref' ? 'old − ref log-prob' : o === 'sampling' ? 'sampling log-prob' : 'per-token advantage')));
  pick.value = by;
  const info = el('pre', { className: 'mono' }, 'hover or click a token');
  const show = tok => { info.textContent = `#${tok.i} id ${tok.id} ${JSON.stringify(tok.text)}\nadvantage ${fmt(tok.advantage, 4)}  old ${fmt(tok.old, 4)}  ref ${fmt(tok.ref, 4)}  old−ref ${tok.old != null && tok.ref != null ? fmt(tok.old - tok.ref, 4) : ''}  sampling ${fmt(tok.sampling, 4)}`; };
  const spans = t.tokens.map((tok, i) => {
    tok.i = i;
    const v = value(tok);
    const inMem = i >= t.mem_start && i < t.mem_end;
    // data-* carry the token's index, advantage, coloured value and <mem> membership, so
    // the page can be checked (and scraped) without recomputing them.
    const s = el('span', { className: 'tok' + (inMem ? ' mem' : ''), title: 'id ' + tok.id + (v != null ? ' · ' + by + ' ' + fmt(v, 4) : ''),
      'data-i': i, 'data-adv': tok.advantage, 'data-v': v, 'data-mem': inMem ? '1' : null,
      onmouseenter: () => show(tok), onclick: () => show(tok) }, t.tokenizer ? tok.text : '[' + tok.id + ']');
    const c = color(v, scale);
    if (c) s.style.backgroundColor = c; // CSSOM, allowed under style-src 'self'
    return s;
  });
  append(main, el('h1', {}, 'Tokens of ', el('code', {}, uid), ' sample ' + sample + ' turn ' + turn),
    el('div', { className: 'filters' }, el('label', {}, 'colour by ', pick), el('span', {}, '−' + fmt(scale, 3), ' ', el('span', { className: 'legend' }), ' +' + fmt(scale, 3)),
      el('span', { className: 'tok mem' }, '<mem> span'), el('span', { className: 'muted' }, t.tokens.length + ' tokens, memory [' + t.mem_start + ', ' + t.mem_end + ')')),
    t.note ? el('p', { className: 'err' }, t.note) : null,
    el('p', { className: 'muted' }, t.tokenizer ? 'decoded with ' + t.tokenizer : 'no tokenizer: ids only'),
    el('div', { className: 'tokens' }, spans), info,
    el('h2', {}, 'Response text'), el('pre', {}, t.response));
}

// --- compare ------------------------------------------------------------------------

async function comparePage(p) {
  const series = p.get('series') || '', uid = p.get('uid') || '';
  setCrumbs(link('run', ''), 'compare ' + series, uid);
  const c = await api('compare', { series, uid });
  clear(main);
  append(main, el('h1', {}, el('code', {}, uid), ' across ', el('code', {}, series === '*' ? 'every variant' : series)),
    el('p', {}, c.question || ''), el('div', {}, el('span', { className: 'label' }, 'golds'), goldsBlock(c.golds)));
  const grid = el('div', { className: 'grid' }, c.cells.map(cell => el('div', { className: 'col' },
    el('div', { className: 'head' }, link(cell.group, 'question', { group: cell.group, uid }),
      cell.mean_reward !== undefined ? el('div', {}, 'mean reward ' + fmt(cell.mean_reward)) : null),
    cell.error ? el('pre', { className: 'err' }, cell.error) : null,
    (cell.trajectories || []).map(tr => {
      const last = tr.turns[tr.turns.length - 1];
      const mem = [...tr.turns].reverse().find(t => t.memory);
      return el('div', { className: 'turn' },
        el('div', {}, link('sample ' + tr.sample, 'question', { group: cell.group, uid, turn: tr.sample + '.' + last.turn }), ' ',
          tr.score ? el('span', { className: 'badge ' + (tr.score.reward > 0 ? 'pos' : 'neg') }, 'reward ' + fmt(tr.score.reward)) : null,
          tr.score && !tr.score.format_ok ? el('span', { className: 'badge invalid' }, 'invalid') : null,
          el('span', { className: 'figs' }, tr.turns.length + ' turns')),
        el('div', {}, el('span', { className: 'label' }, 'answer'), el('code', {}, tr.score ? tr.score.answer : last.query)),
        mem ? el('div', {}, el('span', { className: 'label' }, 'last memory'), highlight(mem.memory, c.golds)) : null);
    }))));
  append(main, grid);
}

// --- routing ------------------------------------------------------------------------

const views = { '': overview, dataset: datasetPage, questions: questionsPage, question: questionPage, tokens: tokensPage, compare: comparePage };

async function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const [name, query] = h.split('?', 2);
  const view = views[name];
  try {
    if (!view) throw new Error('no view ' + JSON.stringify(name));
    await view(new URLSearchParams(query || ''));
  } catch (err) {
    showError(err);
  }
}

window.addEventListener('hashchange', route);
route();
