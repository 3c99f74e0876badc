"""Graph rewrites for the browser file (export/web_model.py), each giving the same function with kernels
onnxruntime-web's WASM build runs faster. Every node runs through a WASM kernel (about 5-30 us each on the
demo student); the bookkeeping below depends on the input's shape, so ORT's own optimizations cannot fold it.

- The extended attention mask: the HF export expands attention_mask [B, 1, 1, S] to [B, 1, S, S]
  (Shape, Gather, Unsqueeze, Concat, Equal, Where, Expand: 9 nodes) and then does its elementwise work
  (Cast, 1 - mask, Cast to bool, Where(-max)) on S*S values, of which the [CLS]-only last layer
  (export/cls_only.py) then slices one row. Every use after the Expand is elementwise, a Slice from 0, or
  an Add onto the attention scores (which broadcast [B, 1, 1, S] exactly as they did [B, 1, S, S]), so the
  Expand is dropped and its shape computation with it (`unexpand_mask`).
- token_type_ids that the model does not take: the export gathers row 0 of the token-type table for every
  position (Shape, ConstantOfShape, Gather, DequantizeLinear) and adds it to the embeddings; the row is a
  constant, so the Add gets it as one ([hidden], broadcast) (`fold_constant_rows`).
- Reshapes to [batch, length, heads, head size] whose shape is computed per call from the hidden states'
  Shape (Shape, Gather, Unsqueeze, Concat): a constant [0, 0, heads, head size] ("0" copies the dim)
  (`constant_reshape_shapes`).
- LayerNormalization -> ReduceMean, Sub, SimplifiedLayerNormalization (RMS norm of the centred values: the
  same function), Add bias: ~22 us against ~40 us per [1, 64, 128] norm in the WASM build, 9 norms in the
  demo student (`layer_norm_as_centered_rms`).

The first three are exact (checked on random padded inputs, 1e-5 relative), so the "optimized" file gets
the first and third too, for every runtime (`trim_bookkeeping`, export/optimize.py); the LayerNorm rewrite is exact
up to float rounding, which the int8 activations' dynamic quantization may round one step further (checked
at 1e-2; demo student: labels identical on all 3816 test texts, max logit difference 0.005). Measured on the
demo student's FastGelu .ort, 64 tokens, 1 thread: 7-8% faster in Chromium and in Node's WASM
(docs/results/2026-11-24-wasm-profile.md).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from export.gelu_tanh import constant_value

# ops that map a [B, 1, 1, S] mask to the same values a [B, 1, S, S] one would give, row by row
ELEMENTWISE = {"Cast", "Sub", "Mul", "Add", "Div", "Where", "Not", "Neg", "Equal", "Less", "Greater"}
# the mask's last use: an arithmetic op whose other input (the attention scores) has the full shape
BROADCAST_SINKS = {"Add", "Sub", "Mul", "Where"}
# what the export does to attention_mask before the Expand (the other inputs are axes and shapes)
MASK_RESHAPES = {"Unsqueeze", "Cast", "Reshape"}


def _consumers(model, name: str) -> list:
    return [n for n in model.graph.node if name in n.input]


def _mask_uses_broadcast(model, name: str, graph_outputs: set[str], root: str, seen: set[str] | None = None) -> bool:
    """Every use of name (computed from the expanded mask root), followed through elementwise ops, is a Slice
    starting at 0 or an arithmetic op onto a tensor not computed from root (the attention scores, which
    carry the expanded axes)."""
    seen = seen if seen is not None else set()
    if name in graph_outputs:
        return False
    for n in _consumers(model, name):
        if n.output[0] in seen:
            continue
        seen.add(n.output[0])
        if n.op_type == "Slice":
            starts = constant_value(model, n.input[1])
            if starts is None or np.any(starts != 0) or n.input[0] != name:
                return False
        elif n.op_type not in ELEMENTWISE:
            return False
        elif n.op_type in BROADCAST_SINKS and any(constant_value(model, i) is None
                                                  and not _derived(model, i, root, ELEMENTWISE | {"Slice"})
                                                  for i in n.input if i and i != name):
            continue  # onto the scores: the sink (an elementwise op on the mask alone stays mask-shaped)
        if not _mask_uses_broadcast(model, n.output[0], graph_outputs, root, seen):
            return False
    return True


def _derived(model, name: str, root: str, ops: set[str], first_input_only: bool = False) -> bool:
    """name is root or computed from root by ops (through each op's first input only, with first_input_only)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    stack, seen = [name], set()
    while stack:
        x = stack.pop()
        if x == root:
            return True
        if x in seen:
            continue
        seen.add(x)
        n = producer.get(x)
        if n is not None and n.op_type in ops:
            stack += [i for i in (n.input[:1] if first_input_only else n.input) if i]
    return False


def unexpand_mask(model, mask: str = "attention_mask") -> int:
    """Drop each Expand of the attention mask whose uses only broadcast it (see the module doc). In place;
    the number of Expand nodes dropped."""
    outputs = {o.name for o in model.graph.output}
    done = 0
    for ex in [n for n in model.graph.node if n.op_type == "Expand"]:
        if not _derived(model, ex.input[0], mask, MASK_RESHAPES, first_input_only=True) \
                or not _mask_uses_broadcast(model, ex.output[0], outputs, ex.output[0]):
            continue
        for n in _consumers(model, ex.output[0]):
            n.input[:] = [ex.input[0] if x == ex.output[0] else x for x in n.input]
        model.graph.node.remove(ex)
        done += 1
    return done


def fold_constant_rows(model) -> int:
    """Gather(table, ConstantOfShape(shape) = c) [-> DequantizeLinear, per-tensor] used only by Adds: the Adds
    get table[c] ([hidden], dequantized) as a constant. In place; the number of Gathers folded."""
    from onnx import numpy_helper

    producer = {o: n for n in model.graph.node for o in n.output}
    done = 0
    for g in [n for n in model.graph.node if n.op_type == "Gather"]:
        idx = producer.get(g.input[1])
        table = constant_value(model, g.input[0])
        axis = next((a.i for a in g.attribute if a.name == "axis"), 0)
        if idx is None or idx.op_type != "ConstantOfShape" or table is None or axis != 0 or table.ndim != 2:
            continue
        value = next((numpy_helper.to_array(a.t) for a in idx.attribute if a.name == "value"), None)
        if value is None or value.size != 1 or value.dtype.kind not in "iu":
            continue
        row, out = table[int(value.reshape(-1)[0])], g.output[0]
        users = _consumers(model, out)
        if len(users) == 1 and users[0].op_type == "DequantizeLinear":
            dq = users[0]
            scale = constant_value(model, dq.input[1])
            zp = constant_value(model, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros((), row.dtype)
            if scale is None or zp is None or scale.size != 1 or zp.size != 1:
                continue
            row = (row.astype(np.float32) - zp.astype(np.float32).reshape(())) * scale.astype(np.float32).reshape(())
            out = dq.output[0]
            users = _consumers(model, out)
        if not users or any(u.op_type != "Add" for u in users) or row.dtype != np.float32:
            continue
        name = f"{out}_constant_row"
        model.graph.initializer.append(numpy_helper.from_array(row.astype(np.float32), name))
        for u in users:
            u.input[:] = [name if x == out else x for x in u.input]
        done += 1
    return done


def constant_reshape_shapes(model) -> int:
    """Reshape(data, Concat(dims...)) where each dim is a constant or dim i of some tensor picked by
    Unsqueeze(Gather(Shape(x), i)) at position i: the shape becomes a constant with 0 ("copy data's dim")
    at those positions, so the Shape / Gather / Unsqueeze / Concat chain goes. Exact when data's dim i is
    x's (HF attention reshapes a projection of the hidden states by the hidden states' batch and length;
    trim_web_graph checks the outputs). In place; the number of Reshapes changed."""
    from onnx import numpy_helper

    producer = {o: n for n in model.graph.node for o in n.output}

    def copied_dim(name: str):
        u = producer.get(name)
        if u is None or u.op_type != "Unsqueeze" or len(u.input) < 2:
            return None
        axes = constant_value(model, u.input[1])
        g = producer.get(u.input[0])
        if axes is None or axes.reshape(-1).tolist() != [0] or g is None or g.op_type != "Gather":
            return None
        sh, i = producer.get(g.input[0]), constant_value(model, g.input[1])
        if sh is None or sh.op_type != "Shape" or sh.attribute or i is None or i.size != 1:
            return None
        return int(i.reshape(-1)[0])

    done = 0
    for r in [n for n in model.graph.node if n.op_type == "Reshape"]:
        c = producer.get(r.input[1])
        if c is None or c.op_type != "Concat" or any(a.name == "allowzero" and a.i for a in r.attribute):
            continue
        dims = []
        for pos, x in enumerate(c.input):
            v = constant_value(model, x)
            if v is not None and v.size == 1 and int(v.reshape(-1)[0]) != 0:
                dims.append(int(v.reshape(-1)[0]))
            elif copied_dim(x) == pos:
                dims.append(0)
            else:
                break
        if len(dims) != len(c.input) or 0 not in dims or dims.count(-1) > 1:
            continue
        name = f"{r.input[1]}_constant"
        if name not in {t.name for t in model.graph.initializer}:
            model.graph.initializer.append(numpy_helper.from_array(np.array(dims, np.int64), name))
        r.input[1] = name
        done += 1
    return done


def layer_norm_as_centered_rms(model) -> int:
    """LayerNormalization(x, scale, bias) over the last axis -> SimplifiedLayerNormalization(x - mean(x),
    scale) + bias: the same function (the variance is the mean square of the centred values), and in
    onnxruntime-web's WASM build ReduceMean + Sub + SimplifiedLayerNormalization + Add run in ~22 us where
    LayerNormalization takes ~40 us ([1, 64, 128], Node, 1 thread; docs/results/2026-11-24-wasm-profile.md).
    Only nodes whose Mean / InvStdDev outputs are unused. In place; the number rewritten."""
    from onnx import helper, numpy_helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    used = {x for n in model.graph.node for x in n.input} | {o.name for o in model.graph.output}
    done = 0
    for ln in [n for n in model.graph.node if n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx")]:
        attrs = {a.name: helper.get_attribute_value(a) for a in ln.attribute}
        if attrs.get("axis", -1) != -1 or any(o in used for o in ln.output[1:] if o):
            continue
        x, scale = ln.input[0], ln.input[1]
        bias = ln.input[2] if len(ln.input) > 2 and ln.input[2] else ""
        base = ln.name or ln.output[0]
        mean, centred, normed = f"{base}/mean", f"{base}/centred", f"{base}/rms" if bias else ln.output[0]
        if opset >= 18:
            axes = f"{base}/axes"
            model.graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), axes))
            reduce = helper.make_node("ReduceMean", [x, axes], [mean], name=f"{base}/ReduceMean")
        else:
            reduce = helper.make_node("ReduceMean", [x], [mean], name=f"{base}/ReduceMean", axes=[-1])
        new = [reduce, helper.make_node("Sub", [x, mean], [centred], name=f"{base}/Sub"),
               helper.make_node("SimplifiedLayerNormalization", [centred, scale], [normed], name=f"{base}/RMS",
                                axis=-1, epsilon=float(attrs.get("epsilon", 1e-5)))]
        if bias:
            new.append(helper.make_node("Add", [normed, bias], [ln.output[0]], name=f"{base}/Bias"))
        i = list(model.graph.node).index(ln)
        model.graph.node.remove(ln)
        for k, n in enumerate(new):
            model.graph.node.insert(i + k, n)
        done += 1
    return done


def prune(model) -> int:
    """Remove nodes none of whose outputs is used (repeatedly), then the initializers no node reads (a folded
    table's; ONNX Runtime would warn about each at load); the number of nodes removed."""
    outputs = {o.name for o in model.graph.output}
    removed = 0
    while True:
        used = {x for n in model.graph.node for x in n.input} | outputs
        dead = [n for n in model.graph.node if not any(o in used for o in n.output)]
        if not dead:
            used |= _subgraph_reads(model.graph)  # an If / Loop body may read an outer initializer
            for t in [t for t in model.graph.initializer if t.name not in used]:
                model.graph.initializer.remove(t)
            return removed
        for n in dead:
            model.graph.node.remove(n)
        removed += len(dead)


def _subgraph_reads(graph) -> set[str]:
    """The names the nodes of graph's subgraphs (If / Loop / Scan bodies, nested) read."""
    reads: set[str] = set()
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                reads |= {x for m in g.node for x in m.input} | _subgraph_reads(g)
    return reads


def _id_bound(model, name: str) -> int:
    """The smallest row count of a constant table gathered directly by input name (the vocabulary), 100
    when none is. ORT's EmbedLayerNormalization fusion (quantize.skip_fusions without embed_layer_norm) reads
    the ids itself, cast to int32: its table is the node's third input."""
    cast = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast"}

    def origin(x: str) -> str:
        while x in cast:
            x = cast[x]
        return x

    tables = [(n.input[0], n.input[1]) if n.op_type == "Gather" else (n.input[2], n.input[0])
              for n in model.graph.node if n.op_type == "Gather" or n.op_type == "EmbedLayerNormalization"]
    rows = [t.shape[0] for table, ids in tables
            if origin(ids) == name and (t := constant_value(model, table)) is not None and t.ndim >= 1]
    return max(2, min(rows)) if rows else 100


def _random_feeds(model, n: int, seed: int) -> list[dict]:
    """Feeds for every int64 [batch, sequence] input: ids in [1, vocabulary), masks with trailing padding."""
    rng = np.random.default_rng(seed)
    out = []
    for batch, length, pad in ((1, 12, 0), (2, 9, 4), (3, 16, 7))[:n]:
        feeds = {}
        for i in model.graph.input:
            if "mask" in i.name:
                m = np.ones((batch, length), np.int64)
                m[1:, length - pad:] = 0  # every row after the first padded
                feeds[i.name] = m
            elif "token_type" in i.name:
                feeds[i.name] = np.zeros((batch, length), np.int64)
            else:
                feeds[i.name] = rng.integers(1, _id_bound(model, i.name), size=(batch, length)).astype(np.int64)
        out.append(feeds)
    return out


def max_difference(a: Path, b: Path, checks: int = 3) -> float:
    """The largest |output difference| of two files (same inputs) on `checks` random inputs, relative to
    the largest |output| of a."""
    import onnx

    from export.ort_session import ort_session

    sa, sb = ort_session(a, 1), ort_session(b, 1)
    worst = 0.0
    for feeds in _random_feeds(onnx.load(str(a), load_external_data=False), checks, 0):
        for x, y in zip(sa.run(None, feeds), sb.run(None, feeds)):
            diff = float(np.max(np.abs(x - y))) / max(1e-6, float(np.max(np.abs(x))))
            if not np.isfinite(diff):  # a NaN or inf output: max(worst, nan) would keep worst and pass the file
                return float("inf")
            worst = max(worst, diff)
    return worst


def _bookkeeping(src: Path, out: Path, exact: float, rows: bool = True) -> tuple[dict, str]:
    """The exact trims (mask expansion, constant token-type row unless not `rows`, computed reshape shapes) of
    src, written to out: (their counts, "") when any applied and out computes src's outputs within `exact`
    (relative) on random padded inputs; ({}, why) when that check failed; ({}, "") when nothing matched."""
    import onnx

    model = onnx.load(str(src))
    counts = {"mask_expands_dropped": unexpand_mask(model)}
    if rows:
        counts["constant_rows_folded"] = fold_constant_rows(model)
    counts["reshape_shapes_constant"] = constant_reshape_shapes(model)
    if not any(counts.values()):
        return {}, ""
    prune(model)
    onnx.save(model, str(out))
    why = _differs(src, out, exact)
    return ({}, why) if why else (counts, "")


def trim_bookkeeping(src: Path, out: Path, exact: float = 1e-5) -> dict:
    """Write src with the mask and reshape trims applied to out, for every runtime (the "optimized" file:
    natively its last, [CLS]-only layer otherwise rebuilds the [B, 1, S, S] mask and four reshape shapes per
    call, 2-4% of the demo student's batch-1 time; docs/results/2026-11-29-twenty-ninth-session.md).
    The token-type row stays a Gather: int8-dynamic is quantized from this file, and a row folded into a
    float constant would escape the table's int8 rounding, moving that file's logits (the demo's int8
    accuracies moved by 0.001-0.0014 when it did). Returns the counts with nodes_before, nodes_after and
    max_relative_difference; nothing to trim or a failed check: src copied unchanged, {"skipped": why}."""
    import shutil
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory() as d:
        step = Path(d) / "bookkeeping.onnx"
        counts, why = _bookkeeping(src, step, exact, rows=False)
        if not counts:
            shutil.copyfile(src, out)
            return {"skipped": why or "nothing to trim (no expanded attention mask, no reshape by a computed "
                    "shape)"}
        record = {**counts, "nodes_before": len(onnx.load(str(src), load_external_data=False).graph.node),
                  "nodes_after": len(onnx.load(str(step), load_external_data=False).graph.node),
                  "max_relative_difference": max_difference(src, step)}
        shutil.copyfile(step, out)
    return record


def trim_web_graph(src: Path, out: Path, exact: float = 1e-5, close: float = 1e-2) -> dict:
    """Write src with the trims applied to out (ONNX) and say what changed: {mask_expands_dropped,
    constant_rows_folded, reshape_shapes_constant, layer_norms_as_centered_rms, nodes_before, nodes_after,
    max_relative_difference}, each part with its check:
    - the bookkeeping trims give the same function: outputs within `exact` (relative) of src's on random
      padded inputs, else none of them is used ("bookkeeping_skipped" says why);
    - the LayerNorm rewrite gives the same function up to float rounding, which the int8 activations'
      dynamic quantization can round a step further: outputs within `close` of the previous graph's, else
      it is not used ("layer_norm_skipped"). The export stage then checks the file's labels on the test split.
    A source made from the "optimized" file comes with the mask and reshapes already trimmed
    (trim_bookkeeping): the token-type row and the LayerNorm rewrite are left. Nothing to trim: src copied
    unchanged, {"skipped": why}."""
    import shutil
    import tempfile

    import onnx

    record: dict = {"nodes_before": len(onnx.load(str(src), load_external_data=False).graph.node)}
    with tempfile.TemporaryDirectory() as d:
        step = Path(d) / "bookkeeping.onnx"
        counts, why = _bookkeeping(src, step, exact)
        if why:
            record["bookkeeping_skipped"] = why
        record.update(counts)
        base = step if counts else src
        model = onnx.load(str(base))
        norms = layer_norm_as_centered_rms(model)
        if norms:
            onnx.save(model, str(out))
            why = _differs(base, out, close)
            if why:
                record["layer_norm_skipped"] = why
                shutil.copyfile(base, out)
                model = onnx.load(str(out))
            else:
                record["layer_norms_as_centered_rms"] = norms
        elif base != src:
            shutil.copyfile(base, out)
        if not any(k in record for k in ("mask_expands_dropped", "layer_norms_as_centered_rms")):
            shutil.copyfile(src, out)
            reasons = [record[k] for k in ("bookkeeping_skipped", "layer_norm_skipped") if k in record]
            return {"skipped": "; ".join(reasons) or "nothing to trim (no expanded attention mask, no constant "
                    "embedding row, no reshape by a computed shape, no LayerNormalization)"}
        record["nodes_after"] = len(model.graph.node)
        record["max_relative_difference"] = max_difference(src, out)
    return record


def _differs(a: Path, b: Path, tolerance: float) -> str:
    """"" when b's outputs are within tolerance (relative) of a's on random padded inputs, else why not."""
    try:
        diff = max_difference(a, b)
    except Exception as e:  # noqa: BLE001 - ORT's own types: the trim is an optimization, never a failure
        last = str(e).strip().splitlines()[-1][:200] if str(e).strip() else ""
        return f"the trimmed graph could not be checked against its source ({type(e).__name__}: {last}): not used"
    if not diff <= tolerance:
        return f"the trimmed graph's outputs differ from its source's by {diff:.2e} (relative, > {tolerance:g}): not used"
    return ""
