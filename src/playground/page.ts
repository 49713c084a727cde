/**
 * The playground: one static HTML page (no build step, no external assets) that talks to the gateway
 * it is served from. Paste a key, optionally mint a short-lived token from it, pick a model, chat with
 * streamed output, and read usage, rate-limit and cache headers off each answer.
 *
 * Served only when the `playground` option is on (the dev Worker sets it; production does not). It holds
 * no secret: the key typed into it stays in the page's memory.
 */

// The page parses SSE itself: it ships as a string with no bundler, so eventsource-parser (which the
// server side uses) cannot be imported here. The parser below follows the spec's line rules (CR, LF or
// CRLF; events end at a blank line; chunks may split anywhere).
const SCRIPT = String.raw`
const $ = (id) => document.getElementById(id)
const base = location.pathname.replace(/\/playground\/?$/, '')
let credential = ''
const history = []

function show(id, text, kind) {
  const el = $(id)
  el.textContent = text
  el.dataset.kind = kind || ''
}

function useCredential() {
  credential = $('key').value.trim()
  return credential
}

async function api(path, init) {
  const headers = Object.assign({ authorization: 'Bearer ' + credential }, init && init.body ? { 'content-type': 'application/json' } : {})
  return fetch(base + path, Object.assign({}, init, { headers }))
}

async function errorText(res) {
  try { const body = await res.json(); return res.status + ' ' + (body.error ? body.error.code + ': ' + body.error.message : JSON.stringify(body)) } catch { return res.status + ' ' + res.statusText }
}

// A secret key works from this page only if it lists the page's origin (podgate refuses browser use otherwise).
$('origin').textContent = location.origin

async function loadModels() {
  if (!useCredential()) return show('status', 'Paste a podgate key first.', 'error')
  const res = await api('/v1/models')
  if (!res.ok) return show('status', 'Models: ' + await errorText(res), 'error')
  const list = (await res.json()).data
  $('model').replaceChildren(...list.map((m) => Object.assign(document.createElement('option'), { value: m.id, textContent: m.id })))
  $('send').disabled = list.length === 0
  show('status', list.length + ' model(s) available.', 'ok')
}

async function mintToken() {
  if (!$('key').value.trim()) return show('token-status', 'Paste a key first.', 'error')
  credential = $('key').value.trim()
  // Short-lived (an empty TTL takes the gateway's default, never past its maximum), and not bound to an origin: this page is same-origin with podgate, and browsers send no
  // Origin header on same-origin GETs (GET /v1/models), which an origin-bound token requires.
  const res = await api('/v1/tokens', { method: 'POST', body: JSON.stringify({ ttlSeconds: Number($('ttl').value) || undefined }) })
  if (res.status === 404) return show('token-status', 'This gateway has no POST /v1/tokens: the key is used directly.', 'warn')
  if (!res.ok) return show('token-status', 'Mint failed: ' + await errorText(res), 'error')
  const body = await res.json()
  $('key').value = body.token
  credential = body.token
  show('token-status', 'Using a short-lived token ' + body.id + ', expires ' + new Date(body.expiresAt).toISOString() + '.', 'ok')
}

function readHeaders(res) {
  const remaining = ['x-ratelimit-remaining-requests', 'x-ratelimit-remaining-tokens', 'ratelimit']
    .map((h) => res.headers.get(h) === null ? null : h.replace('x-ratelimit-', '') + ': ' + res.headers.get(h))
    .filter(Boolean)
  show('ratelimit', remaining.length ? remaining.join(' | ') : 'no rate-limit headers')
  show('cache', res.headers.get('x-podgate-cache') || 'no cache header')
  show('request-id', res.headers.get('x-request-id') || '')
}

function sseEvents(onData) {
  let buffer = ''
  let data = []
  return (text, done) => {
    buffer += text
    // A CR at the end of a chunk may be half of a CRLF: hold it back so it is not read as a blank line.
    const hold = !done && buffer.endsWith('\r') ? '\r' : ''
    const lines = (hold ? buffer.slice(0, -1) : buffer).split(/\r\n|\r|\n/)
    // The last piece is a partial line: keep it unless the stream ended.
    buffer = done ? '' : lines.pop() + hold
    for (const line of lines) {
      if (line === '') { if (data.length) onData(data.join('\n')); data = []; continue }
      if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5))
    }
  }
}

async function send(event) {
  event.preventDefault()
  if (!useCredential()) return show('status', 'Paste a podgate key first.', 'error')
  const prompt = $('prompt').value.trim()
  if (!prompt) return
  history.push({ role: 'user', content: prompt })
  const bubble = addMessage('assistant', '')
  const asked = addMessage('user', prompt, bubble)
  $('prompt').value = ''
  $('send').disabled = true
  show('status', 'Streaming...', '')
  show('usage', '')
  let answer = ''
  let error = ''
  try {
    const res = await api('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model: $('model').value, messages: history, stream: true, stream_options: { include_usage: true }, max_tokens: Number($('max-tokens').value) || undefined }),
    })
    readHeaders(res)
    if (!res.ok) error = await errorText(res)
    else {
      let finished = false
      const feed = sseEvents((data) => {
        if (data === '[DONE]') { finished = true; return }
        const chunk = JSON.parse(data)
        if (chunk.error) { error = 'Stream failed: ' + chunk.error.code + ': ' + chunk.error.message; return }
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta
        if (delta && delta.content) { answer += delta.content; bubble.textContent = answer }
        if (chunk.usage) show('usage', 'prompt ' + chunk.usage.prompt_tokens + ' + completion ' + chunk.usage.completion_tokens + ' = ' + chunk.usage.total_tokens + ' tokens')
      })
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
      for (;;) {
        const { value, done } = await reader.read()
        feed(value || '', done)
        if (done) break
      }
      if (!finished && !error) error = 'Stream ended without [DONE].'
    }
  } catch (err) {
    error = 'Network error: ' + err.message
  }
  // No answer (refused, a network error, a stream that broke or failed before any text): the prompt leaves
  // the conversation, on screen too, and goes back in the box to send again. An answer cut short stays, as shown.
  if (answer || !error) history.push({ role: 'assistant', content: answer })
  else { history.pop(); bubble.remove(); asked.remove(); $('prompt').value = prompt }
  show('status', error || 'Done.', error ? 'error' : 'ok')
  $('send').disabled = false
}

function addMessage(role, text, before) {
  const el = Object.assign(document.createElement('div'), { className: 'msg ' + role, textContent: text })
  $('messages').insertBefore(el, before || null)
  return el
}

$('load').addEventListener('click', loadModels)
$('mint').addEventListener('click', mintToken)
$('chat').addEventListener('submit', send)
`

const STYLE = `
:root { color-scheme: light dark; --accent: #6d28d9; --muted: #6b7280; --ok: #15803d; --bad: #b91c1c; --warn: #b45309 }
* { box-sizing: border-box }
body { font: 15px/1.5 system-ui, sans-serif; margin: 0; padding: 24px; max-width: 880px; margin-inline: auto }
h1 { font-size: 22px; margin: 0 0 4px } h1 span { color: var(--accent) }
p.lead { color: var(--muted); margin: 0 0 20px }
fieldset { border: 1px solid #d1d5db55; border-radius: 10px; padding: 12px 14px; margin: 0 0 14px }
legend { font-weight: 600; padding: 0 6px }
.row { display: flex; gap: 8px; align-items: center; flex-wrap: wrap }
input, select, textarea, button { font: inherit; border-radius: 8px; border: 1px solid #9ca3af88; padding: 7px 10px; background: transparent; color: inherit }
input#key { flex: 1; min-width: 260px; font-family: ui-monospace, monospace }
textarea { width: 100%; min-height: 64px; resize: vertical }
button { background: var(--accent); color: white; border: 0; cursor: pointer } button:disabled { opacity: .5; cursor: default }
#messages { display: flex; flex-direction: column; gap: 8px; margin: 0 0 10px; min-height: 40px }
.msg { padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; max-width: 90% }
.msg.user { align-self: flex-end; background: #6d28d922 } .msg.assistant { align-self: flex-start; background: #9ca3af22 }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 0 }
.hint { color: var(--muted); font-size: 13px; margin: 8px 0 0 } code { font-size: 12px }
dt { color: var(--muted) } dd { margin: 0; font-family: ui-monospace, monospace; font-size: 13px }
[data-kind=ok] { color: var(--ok) } [data-kind=error] { color: var(--bad) } [data-kind=warn] { color: var(--warn) }
`

const BODY = `
<h1><span>podgate</span> playground</h1>
<p class="lead">A dev-only page: chat with your models through this gateway and see what its headers say.</p>
<fieldset><legend>Credential</legend>
  <div class="row">
    <input id="key" type="password" placeholder="pg_sk_... (a dev key) or a token" autocomplete="off" aria-label="podgate key">
    <label>TTL <input id="ttl" type="number" min="1" placeholder="default" style="width:80px" aria-label="token lifetime in seconds (empty: the gateway's default)">s</label>
    <button id="mint" type="button">Mint short-lived token</button>
    <button id="load" type="button">Load models</button>
  </div>
  <p class="hint">Use a dev key that allows this page's origin (browsers send <code>Origin</code> on every POST, same-origin ones too): <code>npm run keys -- create --name playground --origins <span id="origin"></span></code>, or a publishable key for it. Minting trades it for a short-lived token, which the page then uses instead.</p>
  <div id="token-status" role="status"></div>
</fieldset>
<fieldset><legend>Chat</legend>
  <div id="messages" aria-live="polite"></div>
  <form id="chat">
    <textarea id="prompt" placeholder="Ask something" aria-label="prompt"></textarea>
    <div class="row">
      <label>Model <select id="model" aria-label="model"></select></label>
      <label>max_tokens <input id="max-tokens" type="number" min="1" value="128" style="width:90px"></label>
      <button id="send" type="submit" disabled>Send</button>
    </div>
  </form>
</fieldset>
<fieldset><legend>Last answer</legend>
  <dl>
    <dt>status</dt><dd id="status" role="status">Paste a key, then load models.</dd>
    <dt>usage</dt><dd id="usage"></dd>
    <dt>rate limit</dt><dd id="ratelimit"></dd>
    <dt>cache</dt><dd id="cache"></dd>
    <dt>request id</dt><dd id="request-id"></dd>
  </dl>
</fieldset>
`

export const PLAYGROUND_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>podgate playground</title><style>${STYLE}</style></head>
<body>${BODY}<script>${SCRIPT}</script></body></html>`

/** CSP hash of the inline script, so the page runs no script but its own. Computed once per isolate. */
let scriptHash: Promise<string> | undefined
function hashScript(): Promise<string> {
  scriptHash ??= crypto.subtle.digest('SHA-256', new TextEncoder().encode(SCRIPT)).then((d) => btoa(String.fromCharCode(...new Uint8Array(d))))
  return scriptHash
}

/**
 * The `GET /playground` handler.
 *
 * @example
 * if (config.playground) app.get('/playground', playgroundHandler())
 */
export function playgroundHandler() {
  return async function playground(): Promise<Response> {
    const hash = await hashScript()
    return new Response(PLAYGROUND_HTML, {
      headers: {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': `default-src 'none'; script-src 'sha256-${hash}'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
      },
    })
  }
}
