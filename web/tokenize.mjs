// Token ids from the web bundle's JavaScript tokenizer, for the bundle stage to compare with Python's.
//   node web/tokenize.mjs VOCAB.txt OPTIONS.json TEXTS.json OUT.json   (OPTIONS: WordPiece constructor options)
import { readFile, writeFile } from "node:fs/promises";
import { WordPiece } from "./demo/wordpiece.mjs";

const [vocab, options, texts, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node web/tokenize.mjs VOCAB.txt OPTIONS.json TEXTS.json OUT.json");
  process.exit(2);
}
const wp = new WordPiece(await readFile(vocab, "utf8"), JSON.parse(await readFile(options, "utf8")));
const ids = JSON.parse(await readFile(texts, "utf8")).map((t) => wp.encode(t));
await writeFile(out, JSON.stringify(ids));
