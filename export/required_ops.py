"""required_operators.config: the operator kernels (and their types) the bundled .ort needs, the input of
an ONNX Runtime reduced-operator build (`build.sh --include_ops_by_config`), which links only those kernels.

It is read from the .ort file itself with ONNX Runtime's own generator (the function its converter calls for
`--enable_type_reduction`), so it lists exactly what that file's graph uses: the .ort is converted for
export.ort_target_platform ahead of time and a minimal build loads it without re-optimizing, so no other
operator can appear at run time. tests/test_hf_layout.py checks it against the operators an ONNX Runtime
session over the .ort actually runs."""
from __future__ import annotations

from pathlib import Path

CONFIG_NAME = "required_operators.config"


def write_required_ops(ort_file: Path, dest: Path, shown_name: str) -> dict:
    """Write the config for ort_file to dest; shown_name replaces the absolute path in its header comment (the
    file must not name the build machine's folders). Returns {domain: {opset: [ops]}} for the metadata."""
    import logging

    from onnxruntime.tools.ort_format_model import create_config_from_models

    tmp = dest.with_name(dest.name + ".part")
    quiet = logging.getLogger("ort_format_model.utils")  # it logs the temporary path at INFO
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        create_config_from_models([ort_file], tmp, enable_type_reduction=True)
    finally:
        quiet.setLevel(level)
    text = tmp.read_text().replace(str(ort_file), shown_name)
    tmp.unlink()
    dest.write_text(text)
    return operators(dest)


def operators(config: Path) -> dict[str, dict[str, list[str]]]:
    """{domain: {opset: sorted op types}} as ONNX Runtime's build reads the file (its own parser)."""
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    required, _ = parse_config(str(config), True)
    return {domain: {str(opset): sorted(ops) for opset, ops in sorted(by_opset.items())}
            for domain, by_opset in sorted(required.items())}


def readme_section(config_rel: str, ort_rel: str, ops: dict[str, dict[str, list[str]]],
                   string_model: bool = True) -> str:
    """The bundle README's build recipe for a runtime holding only these kernels."""
    count = sum(len(v) for by_opset in ops.values() for v in by_opset.values())
    string_note = (": the string-in `-text.onnx` model needs the full runtime and onnxruntime-extensions"
                   if string_model else "")
    domains = ", ".join(f"{d} ({sum(len(v) for v in o.values())})" for d, o in ops.items())
    return f"""
## A smaller ONNX Runtime: only the operators this model uses

`{config_rel}` lists the {count} operator kernels `{ort_rel}` needs ({domains}), with the
data types each one is called with. ONNX Runtime builds a library with only those (per its "Build a custom
ONNX Runtime package" page); from an ONNX Runtime source checkout, for Android arm64:

    ./build.sh --config MinSizeRel --android --android_sdk_path $ANDROID_HOME \\
      --android_ndk_path $ANDROID_NDK_HOME --android_abi arm64-v8a --android_api 29 \\
      --build_shared_lib --minimal_build --disable_ml_ops --disable_exceptions --disable_rtti \\
      --include_ops_by_config /path/to/bundle/{config_rel} --enable_reduced_operator_type_support \\
      --skip_tests --parallel

(`--ios --apple_sysroot iphoneos --osx_arch arm64 --apple_deploy_target 15.1 --use_xcode` in place of the
`--android*` options for an iPhone). A minimal build runs `.ort` files only and this one runs only
`{ort_rel}`{string_note}, so with this build the app tokenizes (see metadata.json `text_normalisation`) and feeds
token ids. The config was
written from the `.ort` file by ONNX Runtime's own generator
(`onnxruntime.tools.ort_format_model.create_config_from_models`, type reduction on).
"""
