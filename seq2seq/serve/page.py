"""The page at `/`: a text tab (a text box, an optional glossary, and each sentence's
translation with its confidence) and a file tab (a file sent to LibreTranslate's
`/translate_file`, the translated file fetched from its `translatedFileUrl` and downloaded),
language pickers filled from /languages, a key field when the server needs one (sent as
`Authorization: Bearer`, and as `api_key` with a file). Plain HTML and a little JavaScript,
served as one string: no build step, no files to ship."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seq2seq translate</title>
<style>
body { font: 16px/1.4 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
textarea { width: 100%; box-sizing: border-box; font: inherit; }
.row { display: flex; gap: 1rem; align-items: center; margin: .5rem 0; flex-wrap: wrap; }
table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
td, th { border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left; }
.confidence { white-space: nowrap; font-variant-numeric: tabular-nums; }
.low { color: #b00; }
#error, #file-error { color: #b00; }
[role="tablist"] { display: flex; gap: .25rem; margin: 1rem 0 .5rem;
  border-bottom: 1px solid #ccc; }
[role="tab"] { font: inherit; padding: .3rem 1rem; border: 1px solid #ccc; border-bottom: none;
  background: #f4f4f4; cursor: pointer; }
[role="tab"][aria-selected="true"] { background: #fff; font-weight: 600; }
#file-panel .row { margin: 1rem 0; }
</style>
</head>
<body>
<h1>seq2seq translate</h1>
<div class="row">
  <label>From <select id="source"></select></label>
  <label>To <select id="target"></select></label>
  <label id="key-row" hidden>API key <input id="key" type="password" autocomplete="off"></label>
</div>
<div role="tablist">
  <button id="tab-text" role="tab" type="button" aria-selected="true"
    aria-controls="text-panel">Text</button>
  <button id="tab-file" role="tab" type="button" aria-selected="false"
    aria-controls="file-panel" hidden>Files</button>
</div>
<section id="text-panel" role="tabpanel">
<textarea id="text" rows="6" placeholder="Text to translate"></textarea>
<div class="row"><button id="translate" type="button">Translate</button></div>
<details>
  <summary>Glossary (optional)</summary>
  <p>One term pair a line: <code>source term = target term</code>.</p>
  <textarea id="glossary" rows="4" placeholder="cat = chat"></textarea>
</details>
<p id="error" role="alert"></p>
<table id="result" hidden>
  <thead><tr><th>Source sentence</th><th>Translation</th><th>Confidence</th></tr></thead>
  <tbody></tbody>
</table>
</section>
<section id="file-panel" role="tabpanel" hidden>
<p>A document or localization file, translated whole and given back in its own format:
<span id="formats"></span>.</p>
<div class="row">
  <input id="file" type="file">
  <button id="translate-file" type="button">Translate file</button>
</div>
<p id="file-status" role="status"></p>
<p id="file-error" role="alert"></p>
<p><a id="download" hidden></a></p>
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let languages = [];
let beam = { size: 1, most: 1 };  // the server's default beam and its limit, from /info

function option(select, code, name) {
  const o = document.createElement("option");
  o.value = code;
  o.textContent = name + " (" + code + ")";
  select.appendChild(o);
}

function fillTargets() {
  const source = languages.find((l) => l.code === $("source").value);
  $("target").replaceChildren();
  for (const code of source ? source.targets : []) {
    const target = languages.find((l) => l.code === code);
    option($("target"), code, target ? target.name : code);
  }
}

function sentences(text) {
  return text.split(/(?<=[.!?\u3002])\\s+|\\n+/).map((s) => s.trim()).filter((s) => s);
}

function glossaryPairs() {
  return $("glossary").value.split("\\n").map((line) => line.split("="))
    .filter((p) => p.length === 2 && p[0].trim() && p[1].trim())
    .map((p) => [p[0].trim(), p[1].trim()]);
}

async function translate() {
  $("error").textContent = "";
  const texts = sentences($("text").value);
  if (!texts.length) { $("error").textContent = "Type some text first."; return; }
  const body = { texts: texts, source_lang: $("source").value, target_lang: $("target").value };
  const pairs = glossaryPairs();
  if (pairs.length) {  // a glossary's terms are kept by beam search: at least 2 wide
    body.glossary = pairs;
    body.beam_size = Math.min(Math.max(beam.size, 2), beam.most);
  }
  $("translate").disabled = true;
  try {
    const headers = { "Content-Type": "application/json" };
    const key = $("key").value.trim();
    if (key) headers.Authorization = "Bearer " + key;  // a server with --api-keys needs one
    const answer = await fetch("translate", {
      method: "POST", headers: headers, body: JSON.stringify(body),
    });
    const data = await answer.json();
    if (!answer.ok) { $("error").textContent = data.error; return; }
    const rows = $("result").querySelector("tbody");
    rows.replaceChildren();
    texts.forEach((source, i) => {
      const row = rows.insertRow();
      row.insertCell().textContent = source;
      row.insertCell().textContent = data.translations[i];
      const cell = row.insertCell();
      const score = data.scores[i];
      const confidence = score === null ? 0 : Math.exp(score);
      cell.textContent = Math.round(100 * confidence) + "%";
      cell.className = "confidence" + (confidence < 0.3 ? " low" : "");
    });
    $("result").hidden = false;
  } catch (e) {
    $("error").textContent = "The server did not answer: " + e;
  } finally {
    $("translate").disabled = false;
  }
}

function translatedName(name, target) {  // notes.txt -> notes.fr.txt
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(0, dot) + "." + target + name.slice(dot) : name + "." + target;
}

async function translateFile() {
  $("file-error").textContent = "";
  const file = $("file").files[0];
  if (!file) { $("file-error").textContent = "Choose a file first."; return; }
  const form = new FormData();  // LibreTranslate's POST /translate_file
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  const key = $("key").value.trim();
  if (key) form.append("api_key", key);
  $("translate-file").disabled = true;
  $("download").hidden = true;
  $("file-status").textContent = "Translating " + file.name + "…";
  try {
    const answer = await fetch("translate_file", { method: "POST", body: form });
    const data = await answer.json();
    if (!answer.ok) { $("file-error").textContent = data.error; return; }
    const translated = await fetch(data.translatedFileUrl);
    if (!translated.ok) { $("file-error").textContent = (await translated.json()).error; return; }
    const link = $("download");
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(await translated.blob());
    link.download = translatedName(file.name, $("target").value);
    link.textContent = "Download " + link.download;
    link.hidden = false;
    link.click();  // the download starts by itself; the link stays to save it again
  } catch (e) {
    $("file-error").textContent = "The server did not answer: " + e;
  } finally {
    $("file-status").textContent = "";
    $("translate-file").disabled = false;
  }
}

function showTab(name) {
  for (const tab of ["text", "file"]) {
    $(tab + "-panel").hidden = tab !== name;
    $("tab-" + tab).setAttribute("aria-selected", String(tab === name));
  }
}

function offerFiles(settings) {
  const formats = settings.supportedFilesFormat || [];
  if (!settings.filesTranslation || !formats.length) return;
  $("file").accept = formats.join(",");
  $("formats").textContent = formats.join(" ");
  $("tab-file").hidden = false;
  $("tab-text").addEventListener("click", () => showTab("text"));
  $("tab-file").addEventListener("click", () => showTab("file"));
  $("translate-file").addEventListener("click", translateFile);
}

async function start() {
  languages = await (await fetch("languages")).json();
  const info = await (await fetch("info")).json();
  const settings = await (await fetch("frontend/settings")).json();
  $("key-row").hidden = !settings.keyRequired;
  beam = { size: info.decode.beam_size, most: info.limits.max_beam_size };
  for (const l of languages.filter((l) => l.targets.length)) {
    option($("source"), l.code, l.name);
  }
  fillTargets();
  $("source").addEventListener("change", fillTargets);
  $("translate").addEventListener("click", translate);
  offerFiles(settings);
}
start();
</script>
</body>
</html>
"""


def add_route(app) -> None:
    """GET /: the page."""
    from fastapi.responses import HTMLResponse  # the optional `serve` extra

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        """A page to translate with."""
        return HTMLResponse(PAGE)
