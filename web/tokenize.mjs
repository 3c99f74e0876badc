// Token ids from the web bundle's JavaScript tokenizer, for the bundle stage to compare with Python's.
//   node web/tokenize.mjs VOCAB.txt OPTIONS.json TEXTS.json OUT.json
// OPTIONS: WordPiece constructor options, and "module": the wordpiece.mjs to run (verify-bundle: the bundle's
// own copy; default: the one the bundle stage copies, web/demo/wordpiece.mjs).
import { readFile, writeFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";

const [vocab, options, texts, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node web/tokenize.mjs VOCAB.txt OPTIONS.json TEXTS.json OUT.json");
  process.exit(2);
}
const { module, ...opts } = JSON.parse(await readFile(options, "utf8"));
const { WordPiece } = await import(module ? pathToFileURL(module).href : "./demo/wordpiece.mjs");
const wp = new WordPiece(await readFile(vocab, "utf8"), opts);
const ids = JSON.parse(await readFile(texts, "utf8")).map((t) => wp.encode(t));
await writeFile(out, JSON.stringify(ids));
