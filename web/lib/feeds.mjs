// One text's ONNX Runtime feeds by input name (Node side of the bench scripts): input_ids and attention_mask
// as given, token_type_ids zeros, all int64 [1, n]. A model asking for anything else is an error naming it.
export function feedsFor(ort, names, inp) {
  const shape = [1, inp.input_ids.length];
  const known = { input_ids: inp.input_ids, attention_mask: inp.attention_mask, token_type_ids: inp.input_ids.map(() => 0) };
  const feeds = {};
  for (const name of names) {
    if (!(name in known)) throw new Error(`model input ${name} is not input_ids / attention_mask / token_type_ids`);
    feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), shape);
  }
  return feeds;
}
