// The demo page: type a text, see the label, every probability and the time it took (tokenizer + model),
// all in this browser. The result element carries data-* attributes so a test can read it back.
import { loadClassifier } from "./classifier.mjs";

const $ = (id) => document.getElementById(id);
const threads = Number(new URLSearchParams(location.search).get("threads") || 1);

try {
  const clf = await loadClassifier({ threads });
  const m = clf.meta.model;
  $("about").textContent = `${m.name} ${m.variant} (${m.file}), chosen on ${m.choice.target}: ${m.choice.rule}. ` +
    `onnxruntime-web WASM, ${clf.threads} thread(s).`;
  $("status").textContent = "ready";
  $("status").dataset.ready = "1";
  // an empty text has no answer: the model would still give one (for [CLS][SEP] alone)
  const empty = () => !$("text").value.trim();
  $("classify").disabled = empty();
  $("text").addEventListener("input", () => { $("classify").disabled = empty(); });
  $("form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (empty()) return;
    const r = await clf.classify($("text").value);
    $("label").textContent = r.label;
    $("latency").textContent = `${r.latency_ms.toFixed(2)} ms`;
    $("probs").replaceChildren(...clf.meta.labels.map((name, i) => {
      // labels come from the user's data: set as text, never parsed as HTML
      const pct = (100 * r.probabilities[i]).toFixed(1);
      const bar = document.createElement("div");
      bar.className = "bar";
      bar.style.width = `${pct * 2}px`;
      const cells = [name, `${pct}%`, bar].map((content) => {
        const td = document.createElement("td");
        td.append(content);
        return td;
      });
      const tr = document.createElement("tr");
      tr.append(...cells);
      return tr;
    }));
    const box = $("result");
    Object.assign(box.dataset, { label: r.label, probabilities: JSON.stringify(r.probabilities),
      ids: JSON.stringify(r.ids), latencyMs: String(r.latency_ms) });
    box.dataset.count = String(Number(box.dataset.count) + 1);
  });
} catch (e) {
  $("status").textContent = `failed: ${e.message || e}`;
  $("status").dataset.ready = "error";
}
