"""Stage wiring for quantize and export (ONNX variants, .ort, Core ML)."""
