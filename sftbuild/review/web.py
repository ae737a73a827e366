"""`sftbuild review serve`: the review flow as a local web page (stdlib http.server, 127.0.0.1 only).

GET  /                 the page (its per-session token is in it)
GET  /api/queue        the sample in review order, with this reviewer's votes and the progress
GET  /api/item?id=ID   one record's evidence, its code and its reference, highlighted
POST /api/verdict      {"record_id", "verdict", "reason", "reviewer"} with header X-Review-Token

Writes go to the same store as the terminal flow. A POST must carry the token (a random value
made at start-up and only ever sent inside the page), JSON content, and a local Host header, so
another site open in the same browser cannot write verdicts (no CORS headers are ever sent).
One thread serves requests, because the store's SQLite handle belongs to it.
"""
from __future__ import annotations

import hmac
import html
import json
import secrets
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

from sftbuild import serving
from sftbuild.context import Context, UserError
from sftbuild.review import evidence, stage

LEXERS = {"cuda": "cuda", "triton": "python", "python": "python", "kernelbench": "python"}


def highlight(code: str, language: str) -> str:
    from pygments import highlight as pyg
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    try:
        lexer = get_lexer_by_name(LEXERS.get(language, language))
    except Exception:
        return f"<pre>{html.escape(code)}</pre>"
    return pyg(code, lexer, HtmlFormatter(noclasses=True, nowrap=False))


def make_server(ctx: Context, port: int, reviewer: str = "") -> HTTPServer:
    token = secrets.token_urlsafe(24)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: the terminal shows only the address
            pass

        def _send(self, code: int, body: str | bytes, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", f"{ctype}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Frame-Options", "DENY")
            self.end_headers()
            self.wfile.write(data)

        def _local(self) -> bool:
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            return host in ("127.0.0.1", "localhost")

        def do_GET(self):
            if not self._local():
                return self._send(403, json.dumps({"error": "local requests only"}))
            url = urlparse(self.path)
            if url.path == "/":
                return self._send(200, PAGE.replace("__TOKEN__", token)
                                  .replace("__REVIEWER__", html.escape(reviewer, quote=True)), "text/html")
            if url.path == "/api/queue":
                who = parse_qs(url.query).get("reviewer", [reviewer])[0]
                items = stage.queue(ctx, who)
                return self._send(200, json.dumps({
                    "items": [{"id": it["record_id"], "open": it["open"], "stratum": it["stratum"],
                               "mine": it["mine"], "copies": it["copies"], "verdict": it["verdict"]}
                              for it in items],
                    "done": sum(1 for it in items if it["mine"]), "total": len(items)}))
            if url.path == "/api/item":
                rid = parse_qs(url.query).get("id", [""])[0]
                try:
                    ev = evidence.gather(ctx.store, ctx.store.find(rid).id)
                except Exception as e:
                    return self._send(404, json.dumps({"error": str(e)}))
                d = evidence.as_dict(ev)
                d["code_html"] = highlight(ev.record.code, ev.language)
                d["reference_html"] = highlight(ev.reference["source"], "python") if ev.reference["source"] else ""
                return self._send(200, json.dumps(d, default=str))
            return self._send(404, json.dumps({"error": "not found"}))

        def do_POST(self):
            if urlparse(self.path).path != "/api/verdict":
                return self._send(404, json.dumps({"error": "not found"}))
            if not self._local() or not hmac.compare_digest(self.headers.get("X-Review-Token", ""), token):
                return self._send(403, json.dumps({"error": "bad or missing session token"}))
            if not (self.headers.get("Content-Type") or "").startswith("application/json"):
                return self._send(415, json.dumps({"error": "JSON only"}))
            try:
                n = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
                body = json.loads(self.rfile.read(n) or b"{}")
                rid = stage.verdict(ctx, str(body.get("record_id", "")), str(body.get("verdict", "")),
                                    str(body.get("reason") or ""), str(body.get("reviewer") or reviewer), via="web")
            except (ValueError, UserError) as e:
                return self._send(400, json.dumps({"error": str(e)}))
            return self._send(200, json.dumps({"ok": True, "record_id": rid}))

    return HTTPServer(("127.0.0.1", port), Handler)


def serve(ctx: Context, port: int, reviewer: str = "") -> None:
    server = make_server(ctx, port, reviewer)
    ctx.echo(f"review page: http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops)")
    serving.serve_until_interrupted(server)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>sftbuild review</title>
<meta name="review-token" content="__TOKEN__">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#fafafa;color:#222}
header{position:sticky;top:0;background:#222;color:#eee;padding:8px 14px;display:flex;gap:18px;align-items:center}
header input{font:inherit}
#headline{font-weight:600;padding:10px 14px;background:#fff;border-bottom:1px solid #ddd}
#headline.warn{background:#fff3cd}
#instruction{padding:10px 14px;background:#eef6ff;border-bottom:1px solid #ddd;white-space:pre-wrap}
#instruction b{color:#555;font-weight:500}
#evidence{margin:0;padding:8px 14px;white-space:pre-wrap;font:12px ui-monospace,monospace;background:#fff}
#panes{display:grid;grid-template-columns:1fr 1fr;gap:8px;padding:8px}
#panes>div{background:#fff;border:1px solid #ddd;overflow:auto;max-height:70vh}
#panes h3{margin:0;padding:6px 10px;font-size:13px;background:#eee}
#panes pre{margin:0;padding:8px;font-size:12px}
#reasons{display:none;padding:8px 14px;background:#fde2e1}
#msg{color:#c00}
kbd{background:#444;border-radius:3px;padding:0 4px}
</style></head><body>
<header><span id="progress">loading…</span><span id="pos"></span><span id="state"></span>
<label>reviewer <input id="reviewer" value="__REVIEWER__" size="12"></label>
<span><kbd>a</kbd> accept <kbd>r</kbd> reject <kbd>s</kbd> skip <kbd>b</kbd> back</span><span id="msg"></span></header>
<div id="reasons">reason: <kbd>d</kbd> wrong_description <kbd>c</kbd> wrong_code <kbd>l</kbd> license
<kbd>t</kbd> trivial <kbd>u</kbd> unsafe <kbd>o</kbd> other <kbd>Esc</kbd> cancel</div>
<div id="headline"></div><div id="instruction"></div><pre id="evidence"></pre>
<div id="panes"><div><h3 id="reftitle">reference</h3><div id="reference"></div></div>
<div><h3 id="codetitle">code</h3><div id="code"></div></div></div>
<script>
const TOKEN = document.querySelector('meta[name=review-token]').content;
const REASONS = {d:'wrong_description', c:'wrong_code', l:'license', t:'trivial', u:'unsafe', o:'other'};
let items = [], i = -1, rejecting = false;
const $ = id => document.getElementById(id);
const who = () => $('reviewer').value.trim();
async function loadQueue() {
  const q = await (await fetch('/api/queue?reviewer=' + encodeURIComponent(who()))).json();
  items = q.items;
  $('progress').textContent = q.done + ' / ' + q.total + ' reviewed';
  return q;
}
function nextOpen(from) {
  for (let n = from + 1; n < items.length; n++) if (items[n].open) return n;
  return items.length;
}
async function show(n) {
  i = n; rejecting = false; $('reasons').style.display = 'none';
  if (i >= items.length) {
    $('pos').textContent = ''; $('state').textContent = '';
    $('headline').textContent = 'Done: nothing left open for ' + who() + '.';
    $('evidence').textContent = ''; $('instruction').textContent = ''; $('code').innerHTML = ''; $('reference').innerHTML = '';
    document.body.dataset.state = 'done'; return;
  }
  const it = items[i];
  const d = await (await fetch('/api/item?id=' + it.id)).json();
  $('pos').textContent = '#' + (i + 1) + ' of ' + items.length + ' · ' + it.stratum + (it.copies > 1 ? ' · two reviewers' : '');
  $('state').textContent = it.mine ? 'your verdict: ' + it.mine.verdict : (it.open ? 'open' : 'decided: ' + it.verdict);
  $('headline').textContent = d.headline;
  $('headline').className = /^(UNBOUND|INTERPRETER|NOT)/.test(d.headline) ? 'warn' : '';
  $('evidence').textContent = d.lines.slice(1).filter(l => !l.startsWith('instruction[')).join('\\n');
  const ins = Object.keys(d.instructions).sort((a, b) => (b.startsWith('en') - a.startsWith('en')) || a.localeCompare(b));
  $('instruction').innerHTML = '';
  for (const k of ins) {
    const line = document.createElement('div'), tag = document.createElement('b');
    tag.textContent = k + ': '; line.append(tag, d.instructions[k]); $('instruction').append(line);
  }
  if (!ins.length) $('instruction').textContent = '(no instruction)';
  $('reftitle').textContent = d.reference.title; $('reference').innerHTML = d.reference_html || '<pre>(none)</pre>';
  $('codetitle').textContent = 'code (' + d.language + ') ' + d.name; $('code').innerHTML = d.code_html;
  document.body.dataset.state = 'item'; document.body.dataset.item = it.id;
}
async function decide(verdict, reason) {
  if (!who()) { $('msg').textContent = 'enter a reviewer name first'; $('reviewer').focus(); return; }
  const r = await fetch('/api/verdict', {method: 'POST', headers: {'Content-Type': 'application/json',
    'X-Review-Token': TOKEN}, body: JSON.stringify({record_id: items[i].id, verdict, reason, reviewer: who()})});
  const body = await r.json();
  $('msg').textContent = r.ok ? '' : body.error;
  if (r.ok) { await loadQueue(); await show(nextOpen(i)); }
}
// keys are handled one after another, so fast typing never drops one
let chain = Promise.resolve();
document.addEventListener('keydown', e => {
  if (e.target.tagName === 'INPUT' || e.ctrlKey || e.metaKey || e.altKey) return;
  const key = e.key;
  chain = chain.then(() => handle(key)).catch(err => { $('msg').textContent = String(err); });
});
async function handle(key) {
  if (rejecting) {
    rejecting = false; $('reasons').style.display = 'none';
    if (REASONS[key]) await decide('reject', REASONS[key]);
    return;
  }
  if (i >= items.length && key !== 'b') return;
  const it = items[i];
  if (key === 'a' || key === 'r') {
    if (!(it.open || it.mine)) { $('msg').textContent = 'already decided'; return; }
    if (key === 'a') await decide('accept', '');
    else { rejecting = true; $('reasons').style.display = 'block'; }
  } else if (key === 's') await show(nextOpen(i));
  else if (key === 'b') await show(Math.max(0, i - 1));
}
$('reviewer').addEventListener('change', async () => { await loadQueue(); await show(nextOpen(-1)); });
(async () => { await loadQueue(); await show(items.length ? nextOpen(-1) : 0); })();
</script></body></html>
"""
