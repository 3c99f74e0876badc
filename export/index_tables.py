"""Integer lookup tables widened to int32 for Qualcomm's HTP (the QNN execution provider).

A compact embedding (distill/embeddings.py, student.vocab) maps tokenizer ids to table rows with a constant
Gather on an int16 buffer, then Casts the rows to int32. The HTP's Gather rejects non-quantized 8- and
16-bit integer data: "QNN.backendValidateOpConfig() failed for node `/word_embeddings/Gather` of type
`Gather` with error code 3110" (QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE = QNN_MIN_ERROR_OP_PACKAGE 3000
+ 110), and the node goes to the CPU. Measured with onnxruntime-qnn 2.7.0 (QNN 2.40, soc 57 / arch 75) on a
one-Gather model: int8, uint8, int16 and uint16 tables fail, int32 and int64 tables compile, with int32 or
int64 indices alike (docs/npu.md, "Qualcomm HTP"). An int32 table costs 2 bytes more per tokenizer id
(61 KB for BERT's 30,522) and saves the Cast; NNAPI's Gather takes int32 data too.
"""
from __future__ import annotations

NARROW_INTS = (2, 3, 4, 5)  # onnx.TensorProto UINT8, INT8, UINT16, INT16


def widen_index_tables(model) -> int:
    """In place: every Gather whose data is an 8/16-bit integer initializer gets it as int32, and a Cast to
    int32 that follows it alone is removed (its consumers read the Gather). Returns how many tables changed."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    changed, drop = 0, []
    for n in g.node:
        if n.op_type != "Gather" or n.input[0] not in inits or inits[n.input[0]].data_type not in NARROW_INTS:
            continue
        t = inits[n.input[0]]
        if len(consumers.get(t.name, [])) != 1:
            continue  # shared with another op: leave it alone
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.int32), t.name))
        changed += 1
        after = consumers.get(n.output[0], [])
        cast = after[0] if len(after) == 1 else None
        if (cast is not None and cast.op_type == "Cast" and n.output[0] not in outputs
                and cast.output[0] not in outputs
                and any(a.name == "to" and a.i == TensorProto.INT32 for a in cast.attribute)):
            for c in consumers.get(cast.output[0], []):
                c.input[:] = [n.output[0] if i == cast.output[0] else i for i in c.input]
            drop.append(cast)
    for c in drop:
        g.node.remove(c)
    if changed:  # the Gather's output type changed: stale value_info would contradict it
        names = {n.output[0] for n in g.node if n.op_type == "Gather"}
        keep = [v for v in g.value_info if v.name not in names]
        del g.value_info[:]
        g.value_info.extend(keep)
    return changed
