"""Swift samples: the classifier over Core ML (a Swift WordPiece tokenizer per metadata.json's
text_normalisation), the generator over ONNX Runtime's Objective-C API (the Kotlin sample's greedy loop)."""
from __future__ import annotations

from export.app_samples.common import generation_facts, header, swift_string


def classifier(meta: dict) -> str:
    cm = meta["models"].get("coreml")
    if not cm or not meta.get("bert_wordpiece", True):  # the Swift tokenizer below is BERT's WordPiece only
        return ""
    ids, mask = (i["name"] for i in cm["inputs"][:2])
    out = cm["outputs"][0]["name"]
    norm = meta["text_normalisation"]
    # HF strips accents when it lower-cases and strip_accents is unset (null)
    strip = norm["strip_accents"] if norm["strip_accents"] is not None else norm["lowercase"]
    chinese = norm.get("tokenize_chinese_chars", True)
    steps = "".join(f"\n/// - {step}" for step, on in (("spaces around CJK ideographs", chinese),
                                                        ("strip accents (NFD, nonspacing marks dropped)", strip),
                                                        ("lower-case", norm["lowercase"])) if on)
    special = {k: v["id"] for k, v in norm["special_tokens"].items()}
    labels = ", ".join(swift_string(label) for label in meta["labels"])
    package = cm["file"].split("/")[-1]
    sample = swift_string(meta["samples"][0]["text"]) if meta.get("samples") else '"what a great day"'
    lengths = cm.get("sequence_lengths") or []
    # export.padding's rule, as verify-bundle applies it: pad_id up to the smallest sequence_lengths entry
    pad = cm.get("pad_id", norm["special_tokens"].get("pad_token", {}).get("id", 0))
    return f"""{header(meta)}
// Core ML model {package}: inputs {ids}, {mask} (Int32, [1, n]), output {out} ([1, {len(meta['labels'])}]).
// Drag {package} and tokenizer/vocab.txt into the Xcode project (target membership on). Xcode compiles the
// package into {package.removesuffix('.mlpackage')}.mlmodelc inside the app bundle.
import CoreML
import Foundation

/// BERT WordPiece tokenization, step for step as the training tokenizer does it (Hugging Face tokenizers'
/// BertNormalizer, BertPreTokenizer and WordPiece), on Unicode scalars as tokenizers works on code points:
/// - drop NUL, U+FFFD and control characters; whitespace becomes a space{steps}
/// - split on whitespace and punctuation (ASCII punctuation and Unicode's P* categories)
/// - greedy longest-match word pieces; a word with an unmatched piece, or over 100 scalars, is [UNK]
/// - [CLS] ... [SEP], at most {norm['max_length']} tokens
/// samples.json's token_ids and the string-in ONNX model in this bundle are the reference: check a few texts.
struct WordPieceTokenizer {{
    let vocab: [String: Int32]
    let lowercase = {str(norm['lowercase']).lower()}
    let stripAccents = {str(strip).lower()}
    let chineseChars = {str(chinese).lower()}
    let maxLength = {norm['max_length']}
    let maxScalarsPerWord = 100
    let cls: Int32 = {special.get('cls_token', 101)}, sep: Int32 = {special.get('sep_token', 102)}, \
unk: Int32 = {special.get('unk_token', 100)}

    init(vocabURL: URL) throws {{
        let lines = try String(contentsOf: vocabURL, encoding: .utf8).components(separatedBy: "\\n")
        var v: [String: Int32] = [:]
        for (i, token) in lines.enumerated() where !token.isEmpty {{ v[token] = Int32(i) }}
        vocab = v
    }}

    private static func isControl(_ u: Unicode.Scalar) -> Bool {{
        if u == "\\t" || u == "\\n" || u == "\\r" {{ return false }}  // whitespace, not control
        switch u.properties.generalCategory {{
        case .control, .format, .privateUse, .surrogate: return true
        default: return false  // an unassigned code point stays (and becomes [UNK]), as in tokenizers
        }}
    }}

    private static func isCJK(_ v: UInt32) -> Bool {{
        let blocks: [ClosedRange<UInt32>] = [0x4E00...0x9FFF, 0x3400...0x4DBF, 0x20000...0x2A6DF, 0x2A700...0x2B73F,
                                             0x2B740...0x2B81F, 0x2B820...0x2CEAF, 0xF900...0xFAFF, 0x2F800...0x2FA1F]
        return blocks.contains {{ $0.contains(v) }}
    }}

    private static func isPunctuation(_ u: Unicode.Scalar) -> Bool {{
        let v = u.value
        if (33...47).contains(v) || (58...64).contains(v) || (91...96).contains(v) || (123...126).contains(v) {{
            return true  // ASCII punctuation, $ + < = > ^ ` | ~ included (symbols to Unicode)
        }}
        switch u.properties.generalCategory {{
        case .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation, .initialPunctuation,
             .finalPunctuation, .otherPunctuation: return true
        default: return false
        }}
    }}

    private func normalize(_ text: String) -> String {{
        var out = String.UnicodeScalarView()
        for u in text.unicodeScalars {{
            if u.value == 0 || u.value == 0xFFFD || Self.isControl(u) {{ continue }}
            if u.properties.isWhitespace {{ out.append(" ") }}
            else if chineseChars && Self.isCJK(u.value) {{ out.append(" "); out.append(u); out.append(" ") }}
            else {{ out.append(u) }}
        }}
        var s = String(out)
        if stripAccents {{
            var kept = String.UnicodeScalarView()
            for u in s.decomposedStringWithCanonicalMapping.unicodeScalars {{
                if u.properties.generalCategory != .nonspacingMark {{ kept.append(u) }}
            }}
            s = String(kept)
        }}
        return lowercase ? s.lowercased() : s
    }}

    private func words(_ text: String) -> [[Unicode.Scalar]] {{
        var out: [[Unicode.Scalar]] = [], cur: [Unicode.Scalar] = []
        for u in normalize(text).unicodeScalars {{
            if u == " " {{ if !cur.isEmpty {{ out.append(cur); cur = [] }} }}
            else if Self.isPunctuation(u) {{
                if !cur.isEmpty {{ out.append(cur); cur = [] }}
                out.append([u])
            }} else {{ cur.append(u) }}
        }}
        if !cur.isEmpty {{ out.append(cur) }}
        return out
    }}

    func encode(_ text: String) -> [Int32] {{
        var ids: [Int32] = [cls]
        for word in words(text) {{
            if word.count > maxScalarsPerWord {{ ids.append(unk); continue }}
            var start = 0, pieces: [Int32] = [], bad = false
            while start < word.count {{
                var end = word.count, found: Int32? = nil
                while start < end {{
                    let sub = (start > 0 ? "##" : "") + String(String.UnicodeScalarView(word[start..<end]))
                    if let id = vocab[sub] {{ found = id; break }}
                    end -= 1
                }}
                guard let id = found else {{ bad = true; break }}
                pieces.append(id)
                start = end
            }}
            ids += bad ? [unk] : pieces
        }}
        if ids.count > maxLength - 1 {{ ids = Array(ids.prefix(maxLength - 1)) }}
        return ids + [sep]
    }}
}}

final class PocketformerClassifier {{
    static let labels = [{labels}]
    // Lengths the package was exported for ({', '.join(map(str, lengths)) or 'see metadata.json'}): a range or an
    // enumerated set (which accepts no other length); pad to the smallest one that holds the ids, as
    // metadata.json's "padding" says (the last one is maxLength, where the tokenizer cuts).
    static let lengths: [Int] = [{', '.join(map(str, lengths))}]
    let model: MLModel
    let tokenizer: WordPieceTokenizer

    init(computeUnits: MLComputeUnits = .all) throws {{
        let config = MLModelConfiguration()
        config.computeUnits = computeUnits
        guard let url = Bundle.main.url(forResource: "{package.removesuffix('.mlpackage')}", withExtension: "mlmodelc"),
              let vocab = Bundle.main.url(forResource: "vocab", withExtension: "txt") else {{
            throw NSError(domain: "pocketformer", code: 1, userInfo: [NSLocalizedDescriptionKey:
                "add {package} and tokenizer/vocab.txt to the app target"])
        }}
        model = try MLModel(contentsOf: url, configuration: config)
        tokenizer = try WordPieceTokenizer(vocabURL: vocab)
    }}

    func classify(_ text: String) throws -> (String, Float) {{
        let ids = tokenizer.encode(text)
        let n = Self.lengths.first(where: {{ $0 >= ids.count }}) ?? ids.count
        let inputIds = try MLMultiArray(shape: [1, NSNumber(value: n)], dataType: .int32)
        let mask = try MLMultiArray(shape: [1, NSNumber(value: n)], dataType: .int32)
        for i in 0..<n {{
            inputIds[i] = NSNumber(value: i < ids.count ? ids[i] : {pad})
            mask[i] = NSNumber(value: i < ids.count ? 1 : 0)
        }}
        let input = try MLDictionaryFeatureProvider(dictionary: ["{ids}": inputIds, "{mask}": mask])
        let logits = try model.prediction(from: input).featureValue(for: "{out}")!.multiArrayValue!
        let scores = (0..<Self.labels.count).map {{ logits[$0].floatValue }}
        let best = scores.indices.max(by: {{ scores[$0] < scores[$1] }})!
        let z = scores.map {{ exp($0 - scores[best]) }}.reduce(0, +)
        return (Self.labels[best], 1 / z)
    }}

    /// Prints the label of one text.
    static func demo() throws {{
        let (label, p) = try PocketformerClassifier().classify({sample})
        print("label=\\(label) p=\\(p)")
    }}
}}
"""


def generator(meta: dict) -> str:
    f = generation_facts(meta)
    return f"""{header(meta)}
// Greedy generation with the KV cache over ONNX Runtime's Objective-C API (CocoaPods `onnxruntime-objc`, or
// the Swift package onnxruntime-swift-package-manager): {meta['graph']['file']}, {f['layers']} layers,
// {f['kv']} key/value heads of size {f['head']}, vocabulary {f['vocab']} (the teacher tokenizer's ids), eos {f['eos']}.
// Add {f['file']} to the app target. Tokenize with tokenizer.json (e.g. swift-transformers' Tokenizers).
import Foundation
// the module is OnnxRuntimeBindings in the Swift package, onnxruntime_objc in the CocoaPod
#if canImport(OnnxRuntimeBindings)
import OnnxRuntimeBindings
#else
import onnxruntime_objc
#endif

final class PocketformerGenerator {{
    static let layers = {f['layers']}, kvHeads = {f['kv']}, headSize = {f['head']}, vocab = {f['vocab']}
    static let eos: Int64 = {f['eos']}
    // the position table ends at maxPositions ids; the model trained on windows of trainedContext: past them, it
    // runs on positions it never trained on, and its quality drops
    static let maxPositions = {f['positions']}, trainedContext = {f['trained']}
    private let env: ORTEnv
    private let session: ORTSession

    init() throws {{
        guard let path = Bundle.main.path(forResource: "{f['file'].rsplit('.', 1)[0]}", ofType: "onnx") else {{
            throw NSError(domain: "pocketformer", code: 1,
                          userInfo: [NSLocalizedDescriptionKey: "add {f['file']} to the app target"])
        }}
        env = try ORTEnv(loggingLevel: .warning)
        session = try ORTSession(env: env, modelPath: path, sessionOptions: try ORTSessionOptions())
    }}

    private func longs(_ values: [Int64]) throws -> ORTValue {{
        let data = NSMutableData(bytes: values, length: values.count * MemoryLayout<Int64>.size)
        return try ORTValue(tensorData: data, elementType: .int64, shape: [1, NSNumber(value: values.count)])
    }}

    /// Greedy continuation (token ids) of prompt ids, at most maxNewTokens, ending at eos if it comes.
    func generate(prompt: [Int64], maxNewTokens: Int) throws -> [Int64] {{
        guard !prompt.isEmpty else {{
            throw NSError(domain: "pocketformer", code: 2, userInfo: [NSLocalizedDescriptionKey:
                "the prompt holds no token ids: to generate from nothing, start from {f['start']}"])
        }}
        guard prompt.count + maxNewTokens <= Self.maxPositions else {{
            throw NSError(domain: "pocketformer", code: 3, userInfo: [NSLocalizedDescriptionKey:
                "\\(prompt.count) prompt ids + \\(maxNewTokens) new ones exceed the model's \\(Self.maxPositions) " +
                "positions: keep the prompt's last ids, or generate fewer"])
        }}
        let kinds = ["key", "value"]
        let empty = try ORTValue(tensorData: NSMutableData(length: 0)!, elementType: .float,
                                 shape: [1, NSNumber(value: Self.kvHeads), 0, NSNumber(value: Self.headSize)])
        var past: [String: ORTValue] = [:]
        for i in 0..<Self.layers {{ for k in kinds {{ past["past_key_values.\\(i).\\(k)"] = empty }} }}
        let outputs = Set(["logits"] + (0..<Self.layers).flatMap {{ i in kinds.map {{ "present.\\(i).\\($0)" }} }})
        var ids = prompt, pastLength = 0, out: [Int64] = []
        while out.count < maxNewTokens {{
            let n = ids.count
            var feed = past
            feed["input_ids"] = try longs(ids)
            feed["attention_mask"] = try longs([Int64](repeating: 1, count: pastLength + n))
            feed["position_ids"] = try longs((pastLength..<(pastLength + n)).map {{ Int64($0) }})
            let result = try session.run(withInputs: feed, outputNames: outputs, runOptions: nil)
            let logits = try result["logits"]!.tensorData() as Data  // [1, n, vocab] float32
            let next: Int64 = logits.withUnsafeBytes {{ raw in
                let f = raw.bindMemory(to: Float.self)
                let base = (n - 1) * Self.vocab
                var best = 0
                for v in 1..<Self.vocab where f[base + v] > f[base + best] {{ best = v }}
                return Int64(best)
            }}
            out.append(next)
            if next == Self.eos {{ break }}
            for i in 0..<Self.layers {{ for k in kinds {{ past["past_key_values.\\(i).\\(k)"] = result["present.\\(i).\\(k)"] }} }}
            pastLength += n
            ids = [next]
        }}
        return out
    }}

    /// Replays the first prompt of samples.json and prints whether the stored tokens came back.
    static func demo() throws {{
        let prompt: [Int64] = [{f['prompt_swift']}]  // {f['text']}
        let expected: [Int64] = [{f['want_swift']}]
        let got = try PocketformerGenerator().generate(prompt: prompt, maxNewTokens: {f['n']})
        print("tokens=\\(got) matches samples.json: \\(got == expected)")
    }}
}}
"""
