// The bundle's layout search: `npx node scripts/bundle-layout.mjs . [tries]` (after a change that moved
// the gzipped size of `wrangler deploy`'s bundle up; docs/development.md "Bundle size").
// It bundles src/ and workers/ in memory as wrangler does (esbuild, minified; ~26 bytes short of wrangler's
// file, its sourceMappingURL line), then tries, at random, one move at a time: a value-import line within
// its block, a function declaration within its block (hoisted), a class method or accessor within its
// class, a constant whose initializer reads no other binding to an earlier place in its file. A move is
// kept, written to its file, only when the gzipped bundle shrinks. None changes what runs: src has no module
// side effects and no value-import cycle, declarations are hoisted, and method order is never read.
// Then run the tests and typecheck, and measure the real bundle with the command in docs/development.md.
import * as esbuild from 'esbuild'
import zlib from 'node:zlib'
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
const root = process.argv[2]
const iters = +process.argv[3] || 500
const files = {}
function walk(d) { for (const f of fs.readdirSync(d, { withFileTypes: true })) { const p = path.join(d, f.name); if (f.isDirectory()) { if (f.name !== '__fixtures__' && f.name !== 'testing') walk(p) } else if (p.endsWith('.ts') && !p.endsWith('.test.ts') && !p.endsWith('.d.ts')) files[p] = fs.readFileSync(p, 'utf8') } }
walk(root + '/src'); walk(root + '/workers')
const isValueImport = (l) => /^import (?!type )/.test(l) && / from '[^']+'$/.test(l)
const importFiles = Object.keys(files).filter((p) => files[p].split('\n').filter(isValueImport).length >= 2)
// Each group: { pieces: [[s,e]], targets: [pos] } where a piece may move to any target in its group.
function groups(text) {
  const sf = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true)
  const out = []
  const fnGroup = (stmts, minTarget, endPos) => {
    const names = new Map()
    for (const st of stmts) if (ts.isFunctionDeclaration(st) && st.name) names.set(st.name.text, (names.get(st.name.text) ?? 0) + 1)
    const pieces = stmts.filter((st) => ts.isFunctionDeclaration(st) && st.body && st.name && names.get(st.name.text) === 1).map((st) => [st.getFullStart(), st.end])
    let targets = []
    for (const st of stmts) {
      const pos = st.getFullStart()
      // Not before a file's first statement: its leading comment is the file's header.
      if (pos >= minTarget && pos > 0) targets.push(pos)
      if (ts.isReturnStatement(st) || ts.isThrowStatement(st)) break
    }
    if (!stmts.some((st) => ts.isReturnStatement(st) || ts.isThrowStatement(st))) targets.push(endPos)
    if (pieces.length && targets.length > 1) out.push({ pieces, targets })
  }
  const top = sf.statements
  const firstNonImport = top.find((st) => !ts.isImportDeclaration(st))
  fnGroup(top, firstNonImport ? firstNonImport.getFullStart() : 0, text.length)
  const GLOBALS = new Set(['undefined', 'Infinity', 'NaN', 'Set', 'Map', 'WeakMap', 'WeakSet', 'TextEncoder', 'TextDecoder', 'RegExp'])
  const pure = (node) => { let ok = true; const v = (n) => { if (ts.isIdentifier(n) && !GLOBALS.has(n.text) && !(ts.isPropertyAssignment(n.parent) && n.parent.name === n) && !(ts.isPropertyAccessExpression(n.parent) && n.parent.name === n)) ok = false; if (n.kind === ts.SyntaxKind.ThisKeyword) ok = false; if (ok) ts.forEachChild(n, v) }; v(node); return ok }
  const starts = top.filter((st) => st.getFullStart() >= (firstNonImport ? firstNonImport.getFullStart() : 0)).map((st) => st.getFullStart()).filter((pos) => pos > 0)
  for (const st of top) {
    if (!ts.isVariableStatement(st) || st.declarationList.declarations.length !== 1) continue
    const d = st.declarationList.declarations[0]
    if (!d.initializer || !ts.isIdentifier(d.name) || !pure(d.initializer)) continue
    const targets = starts.filter((x) => x < st.getFullStart())
    if (targets.length) out.push({ pieces: [[st.getFullStart(), st.end]], targets, earlier: true })
  }
  const visit = (node) => {
    if ((ts.isFunctionDeclaration(node) || ts.isFunctionExpression(node) || ts.isArrowFunction(node) || ts.isMethodDeclaration(node)) && node.body && ts.isBlock(node.body) && node.body.statements.length > 1) {
      const st = node.body.statements
      fnGroup(st, st[0].getFullStart(), node.body.statements.end)
    }
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      const ms = node.members.filter((m) => (ts.isMethodDeclaration(m) && m.body) || ts.isGetAccessor(m) || ts.isSetAccessor(m))
      const names = new Map()
      for (const m of node.members) if (ts.isMethodDeclaration(m) && m.name) names.set(m.name.getText(sf), (names.get(m.name.getText(sf)) ?? 0) + 1)
      const pieces = ms.filter((m) => !ts.isMethodDeclaration(m) || names.get(m.name.getText(sf)) === 1).map((m) => [m.getFullStart(), m.end])
      const targets = ms.map((m) => m.getFullStart()).concat([node.members.end])
      if (pieces.length && targets.length > 1) out.push({ pieces, targets })
    }
    ts.forEachChild(node, visit)
  }
  ts.forEachChild(sf, visit)
  return out
}
const fnFiles = Object.keys(files).filter((p) => groups(files[p]).length >= 1)
const plugin = { name: 'mem', setup(b) { b.onLoad({ filter: /\/(src|workers)\/.*\.ts$/ }, (a) => (files[a.path] !== undefined ? { contents: files[a.path], loader: 'ts' } : undefined)) } }
const ctx = await esbuild.context({ entryPoints: [root + '/workers/podgate.ts'], bundle: true, format: 'esm', target: 'es2022', minify: true, keepNames: false, conditions: ['workerd', 'worker', 'browser'], mainFields: ['browser', 'module', 'main'], platform: 'neutral', external: ['cloudflare:*', 'node:*'], write: false, plugins: [plugin], absWorkingDir: root, define: { 'navigator.userAgent': '"Cloudflare-Workers"', 'process.env.NODE_ENV': '"production"' } })
async function size() { const r = await ctx.rebuild(); return zlib.gzipSync(r.outputFiles[0].contents).length }
let best = await size()
console.log('start', best, 'importFiles', importFiles.length, 'fnFiles', fnFiles.length)
const pick = (a) => a[Math.floor(Math.random() * a.length)]
for (let it = 0; it < iters; it++) {
  let p, next
  if (Math.random() < 0.25) {
    p = pick(importFiles)
    const lines = files[p].split('\n')
    const idx = lines.map((l, i) => (isValueImport(l) ? i : -1)).filter((i) => i >= 0)
    const a = pick(idx), b = pick(idx)
    if (a === b) continue
    const nl = lines.slice(); const [x] = nl.splice(a, 1); nl.splice(b, 0, x)
    next = nl.join('\n')
  } else {
    p = pick(fnFiles)
    const text = files[p]
    const g = pick(groups(text))
    const [s, e] = pick(g.pieces)
    const t = pick(g.targets.filter((x) => x < s || x >= e))
    if (t === undefined || t === s) continue
    const piece = text.slice(s, e)
    const rest = text.slice(0, s) + text.slice(e)
    const tt = t > s ? t - (e - s) : t
    next = rest.slice(0, tt) + piece + rest.slice(tt)
  }
  // As a person would write it: one blank line between top-level declarations, a newline at the end.
  next = next.replace(/\n{3,}/g, '\n\n').replace(/\n}\n(?=export |function |async |\/\*\*|const |class |interface |type )/g, '\n}\n\n').replace(/\n*$/, '\n')
  const old = files[p]
  files[p] = next
  let sz
  try { sz = await size() } catch { files[p] = old; continue }
  if (sz < best) { best = sz; console.log(it, best, path.relative(root, p)); fs.writeFileSync(p, files[p]) } else files[p] = old
}
console.log('end', best)
await ctx.dispose()
