// BERT WordPiece tokenizer in plain JavaScript: the same steps as Hugging Face's BertNormalizer,
// BertPreTokenizer and WordPiece model (tokenizers' Rust code), so a page gets the ids the model was
// trained with. The bundle stage checks its ids against the Python tokenizer on the whole test split
// (metadata.json: tokenizer_check), and samples.json stores the expected ids of each sample text.

// CJK ideograph blocks that BERT splits into single characters (tokenizers' is_chinese_char)
const CJK = [[0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f], [0x2b740, 0x2b81f],
  [0x2b820, 0x2ceaf], [0xf900, 0xfaff], [0x2f800, 0x2fa1f]];
const isCJK = (cp) => CJK.some(([a, b]) => cp >= a && cp <= b);
// Unicode's White_Space (Rust's char::is_whitespace): U+2028 / U+2029 too, which Zs alone left out
const isWhitespace = (c) => /\p{White_Space}/u.test(c);
// Cc, Cf, Co, Cs but not Cn: an unassigned code point stays (and becomes [UNK]), as in tokenizers
const isControl = (c) => !(c === "\t" || c === "\n" || c === "\r") && /[\p{Cc}\p{Cf}\p{Co}\p{Cs}]/u.test(c);
const isPunct = (c) => /[!-/:-@[-`{-~]/.test(c) || /\p{P}/u.test(c);

export class WordPiece {
  // vocabText: vocab.txt (one token a line, id = line number); options from metadata.text_normalisation
  constructor(vocabText, { lowercase = true, stripAccents = null, tokenizeChineseChars = true, maxLength = 128,
    unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", prefix = "##", maxCharsPerWord = 100 } = {}) {
    const lines = vocabText.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    this.vocab = new Map(lines.map((t, i) => [t.replace(/\r$/, ""), i]));
    this.lowercase = lowercase;
    // Hugging Face: strip_accents unset follows lowercase
    this.stripAccents = stripAccents === null || stripAccents === undefined ? lowercase : stripAccents;
    this.chinese = tokenizeChineseChars;
    this.maxLength = maxLength;
    this.prefix = prefix;
    this.maxChars = maxCharsPerWord;
    for (const t of [unk, cls, sep]) {
      if (!this.vocab.has(t)) throw new Error(`vocab.txt has no ${t} token`);
    }
    this.unk = this.vocab.get(unk);
    this.cls = this.vocab.get(cls);
    this.sep = this.vocab.get(sep);
  }

  normalize(text) {
    let out = "";
    for (const c of text) {
      const cp = c.codePointAt(0);
      if (cp === 0 || cp === 0xfffd || isControl(c)) continue;
      if (isWhitespace(c)) out += " ";
      else if (this.chinese && isCJK(cp)) out += ` ${c} `;
      else out += c;
    }
    if (this.stripAccents) out = out.normalize("NFD").replace(/\p{Mn}/gu, "");
    if (this.lowercase) out = out.toLowerCase();
    return out;
  }

  // whitespace split, each punctuation character its own word
  preTokenize(text) {
    const words = [];
    for (const chunk of text.split(" ")) {
      let cur = "";
      for (const c of chunk) {
        if (isPunct(c)) {
          if (cur) words.push(cur);
          words.push(c);
          cur = "";
        } else cur += c;
      }
      if (cur) words.push(cur);
    }
    return words;
  }

  // greedy longest-match-first; a word with any unmatched piece is one [UNK]
  wordIds(word) {
    const chars = Array.from(word);
    if (chars.length > this.maxChars) return [this.unk];
    const ids = [];
    let start = 0;
    while (start < chars.length) {
      let end = chars.length;
      let found = null;
      while (start < end) {
        const piece = (start > 0 ? this.prefix : "") + chars.slice(start, end).join("");
        if (this.vocab.has(piece)) { found = this.vocab.get(piece); break; }
        end -= 1;
      }
      if (found === null) return [this.unk];
      ids.push(found);
      start = end;
    }
    return ids;
  }

  // [CLS] ids [SEP], truncated to maxLength (the longest-first truncation of a single text)
  encode(text) {
    const ids = this.preTokenize(this.normalize(text)).flatMap((w) => this.wordIds(w));
    return [this.cls, ...ids.slice(0, this.maxLength - 2), this.sep];
  }
}
