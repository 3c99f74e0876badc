"""The classification task's load-time checks: what its steps would otherwise reject after training."""
from __future__ import annotations

from eval.rows import RNN_MODELS  # no transformer graph: transformer-only variants skip them
from pipeline.config import student_positions
from pipeline.config_rules import (check_names, set_fix as _set, teacher_config, teacher_positions_problem,
                                   teacher_problem)
from pipeline.data import paths_problem, source_problem, unread_problem, unreadable_path_problem
from pipeline.errors import PipelineError

COREML_MODELS = ("student", "lstm", "lstm_distilled")  # the teacher is the model too big to ship
# key -> (what a name there is, registries whose keys it must be): see pipeline.config_rules.REGISTRY_NAMES
NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "student.arch": ("student architecture", ("distill.student:CLASSIFICATION_STUDENTS",)),
    "quantize.models": ("model", ("distill.models:MODEL_NAMES",)),
    "quantize.npu_variants": ("NPU variant", ("export.npu:NPU_VARIANTS",)),
    "export.coreml_variants": ("Core ML variant", ("export.coreml:COREML_VARIANTS",)),
    "export.coreml_shapes": ("Core ML shape mode", ("export.coreml:SHAPE_MODES",)),
    "bench.targets": ("target", ("eval.targets:TARGETS",)),
    "bench.sweep_variants": ("variant", ("export.registry:ONNX_VARIANTS", "export.coreml:COREML_VARIANTS")),
}


def validate(cfg) -> str | None:
    problem = (_generation_config(cfg) or check_names(cfg, NAMES) or source_problem(cfg.data.source, "classification")
               or paths_problem(cfg.data) or unread_problem(cfg.data, "classification")
               or unreadable_path_problem(cfg))
    for rule in (_search_ships_what_is_made, _search_npu_chips, _step_budget_is_generation, _columns_differ,
                 _fusion_names, _embedding_4bit_width, _npu_device, _layer_map_covers_the_student,
                 _quantize_starts_from_fp32, _bench_lengths, _web_target, _bundle_choice_is_made,
                 _classification_exports, _student_init_fits_teacher, _length_fits_teacher,
                 _fine_tune_off_needs_a_classifier, _caps_leave_what_the_stages_need):
        problem = problem or rule(cfg)
    return problem


def _search_ships_what_is_made(cfg) -> str | None:
    """search.variants beyond the default: the best candidate ships the .ort of its variant through
    bundle.variant, so the quantize and export stages must make every one of them."""
    from pipeline.search_checks import DEFAULT_VARIANTS

    v = cfg.search.variants
    # int8-dynamic alone (the default) sets nothing, so a config whose quantize.variants leaves it out still
    # loads (its search times a file it never ships)
    if tuple(v) == DEFAULT_VARIANTS:
        return None
    for key, made in (("quantize.variants", cfg.quantize.variants), ("export.ort_variants", cfg.export.ort_variants)):
        if missing := [x for x in v if x not in made]:
            return (f"'search.variants' has {missing}, which {key} {list(made)} does not make, so the best candidate "
                    f"could not be built or shipped: add them to {key} or drop them from search.variants")
    return None


def _search_npu_chips(cfg) -> str | None:
    """search.npu_compile's load-time rule (whether the compiler is installed is checked when the search
    starts, pipeline/search.py check_npu: a config stays loadable on a host without onnxruntime-qnn)."""
    if cfg.search.npu_compile and not cfg.npu.chips:
        return ("'search.npu_compile' = true but npu.chips is empty: name the Snapdragon chips every candidate must "
                "compile whole for (e.g. [\"8gen2\"]), or set search.npu_compile = false")
    return None


def _columns_differ(cfg) -> str | None:
    d = cfg.data
    if d.text_column == d.label_column:
        return (f"'data.text_column' and 'data.label_column' are both {d.text_column!r}: the texts would be their "
                f"own labels. Set data.text_column to the column of texts and data.label_column to the column of "
                f"class names")
    return None


def _embedding_4bit_width(cfg) -> str | None:
    """quantize.embedding_bits = 4 quantizes the student's word table in blocks of 16 or 32 values per row."""
    q, s = cfg.quantize, cfg.student
    width = s.embedding_dim or s.hidden
    if q.embedding_bits == 4 and "student" in q.models and "int8-dynamic" in q.variants and width % 16:
        return (f"'quantize.embedding_bits' = 4 quantizes blocks of 16 or 32 values, but the student's embedding "
                f"rows are {width} wide ({'student.embedding_dim' if s.embedding_dim else 'student.hidden'}): use "
                f"a multiple of 16, or {_set('quantize.embedding_bits', 8)}")
    transformers = [m for m in q.models if m not in RNN_MODELS]
    fused = q.dynamic_source == "optimized" and "optimized" in q.variants and "embed_layer_norm" not in q.skip_fusions
    if q.embedding_bits == 4 and "int8-dynamic" in q.variants and transformers and fused:
        return (f"'quantize.embedding_bits' = 4 rewrites the word table's Gather, which the EmbedLayerNormalization "
                f"fusion of the int8-dynamic source (quantize.dynamic_source = 'optimized') swallows: keep it out, "
                f"{_set('quantize.skip_fusions', [*q.skip_fusions, 'embed_layer_norm'])}, or "
                f"{_set('quantize.dynamic_source', 'fp32')}, or {_set('quantize.embedding_bits', 8)}")
    return None


def _npu_device(cfg) -> str | None:
    """The NPU device profile the bench's roofline estimates use (bench.devices_file, bench.npu_device)."""
    from eval.npu import get_device, load_devices

    try:
        get_device(load_devices(cfg.bench.devices_file), cfg.bench.npu_device)
    except PipelineError as e:
        return str(e)
    return None


def _generation_config(cfg) -> str | None:
    """A generation setting in a classification run: [lm] (which no classification stage reads) or a decoder
    student, most often a generation config that lacks run.task."""
    from dataclasses import fields

    from distill.student import STUDENTS
    from pipeline.config import LMSection

    if "generation" in STUDENTS.get(cfg.student.arch, STUDENTS["bert"]).tasks:
        return (f"'student.arch' = {cfg.student.arch!r} is a generation student, and run.task is 'classification': "
                f"a generation config sets run.task = \"generation\" under [run]; a classification one picks "
                f"{' or '.join(repr(a) for a, arch in STUDENTS.items() if 'classification' in arch.tasks)}")
    default = LMSection()
    for f in fields(LMSection):
        if (value := getattr(cfg.lm, f.name)) != getattr(default, f.name):
            return (f"'lm.{f.name}' = {value!r} is a generation setting no classification stage reads: remove it, or "
                    f"set run.task = \"generation\" under [run] if this is a generation run")
    return None


def _step_budget_is_generation(cfg) -> str | None:
    """distill.steps / baseline.steps fix the generation budget; classification trains for epochs over its
    texts, so a step count there would be silently ignored."""
    for section in ("distill", "baseline"):
        if steps := getattr(cfg, section).steps:
            return (f"'{section}.steps' = {steps} sets the training budget of run.task = "
                    f"\"generation\" only; classification trains for '{section}.epochs'. Remove {section}.steps "
                    f"(or set it to 0)")
    return None


def _layer_map_covers_the_student(cfg) -> str | None:
    m, layers = cfg.distill.layer_map, cfg.student.layers
    if m and len(m) != layers:
        return (f"'distill.layer_map' has {len(m)} entries but 'student.layers' = {layers}: give one teacher layer "
                f"per student layer, or leave it empty to spread them uniformly")
    if m and (teacher := teacher_config(cfg)) is not None:  # the teacher stage's check, where the teacher is known
        from distill.student import check_layer_map

        try:
            check_layer_map(m, layers, teacher.num_hidden_layers)
        except PipelineError as e:
            return str(e)
    return None


def _quantize_starts_from_fp32(cfg) -> str | None:
    """The classification quantize stage makes every other ONNX variant from the fp32 export (the
    generation stages always export fp32 themselves)."""
    made = cfg.quantize.variants
    if "fp32" not in made:
        return f"quantize.variants = {made} lacks 'fp32': every other ONNX variant is made from the fp32 export; add it"
    return None


def _bench_lengths(cfg) -> str | None:
    """The classification bench times every variant at headline_length, the sweep at seq_lengths."""
    b = cfg.bench
    if not b.seq_lengths or min(b.seq_lengths) < 3:
        return (f"'bench.seq_lengths' = {b.seq_lengths}: give lengths of at least 3 tokens ([CLS] x [SEP]), e.g. "
                f"{_set('bench.seq_lengths', sorted({16, 32, 64, 128, b.headline_length}))}")
    if b.headline_length not in b.seq_lengths:
        return (f"'bench.headline_length' = {b.headline_length} is not one of 'bench.seq_lengths' {b.seq_lengths}; "
                f"pick one of them, e.g. {_set('bench.headline_length', sorted(b.seq_lengths)[len(b.seq_lengths) // 2])}")
    s = cfg.student  # a max_positions below 0 or below max_length: the size checks name that key instead
    if (s.max_positions == 0 or s.max_positions >= s.max_length) and b.headline_length > (rows := student_positions(s)):
        fits = [n for n in b.seq_lengths if n <= rows]
        return (f"'bench.headline_length' = {b.headline_length} is past the student's position table ({rows} rows: "
                f"student.max_positions, else max(student.max_length, 64)), so the student could not be timed at "
                f"the headline length; {_set('bench.headline_length', max(fits)) if fits else 'lower it'} or raise "
                f"student.max_positions")
    return None


def _web_target(cfg) -> str | None:
    """The web bundle is chosen on bundle.web_target's rows: a browser target the bench times."""
    b = cfg.bundle
    from eval.browser import is_browser
    from eval.targets import TARGETS

    browsers = [n for n, t in TARGETS.items() if is_browser(t)]
    if b.web_target not in browsers:
        return (f"'bundle.web_target' = {b.web_target!r} is not a browser target; use one of {', '.join(browsers)}, "
                f"e.g. {_set('bundle.web_target', browsers[0])}")
    if b.web and b.web_target not in cfg.bench.targets:
        return (f"'bundle.web_target' = {b.web_target!r} is not in 'bench.targets' {cfg.bench.targets}, so the web "
                f"bundle would have no timings to choose on; add it: "
                f"{_set('bench.targets', [*cfg.bench.targets, b.web_target])} (or --set bundle.web=false)")
    return None


def _bundle_choice_is_made(cfg) -> str | None:
    """bundle.model / bundle.variant must name a file some stage makes with these settings."""
    b, q, e = cfg.bundle, cfg.quantize, cfg.export
    from distill.models import MODEL_NAMES
    from export.registry import for_variant

    if b.model != "auto" and b.model not in MODEL_NAMES:
        return (f"'bundle.model' = {b.model!r} is not a model; choose auto or one of {', '.join(MODEL_NAMES)}, e.g. "
                f"{_set('bundle.model', 'auto')}")
    want = "student" if b.model == "auto" else b.model
    if want not in q.models:
        return (f"'bundle.model' = {b.model!r} ships the {want}, which 'quantize.models' {q.models} does not make; "
                f"add it: {_set('quantize.models', [*q.models, want])}")
    if not e.ort_variants:
        return (f"'export.ort_variants' is empty: the bundle ships an .ort file; give at least one, e.g. "
                f"{_set('export.ort_variants', ['fp32'])}")
    if b.variant == "auto":
        return None
    if b.variant not in e.ort_variants:
        return (f"'bundle.variant' = {b.variant!r}: no .ort file of it is made ('export.ort_variants' = "
                f"{e.ort_variants}); pick one of those or let the bundle choose: {_set('bundle.variant', 'auto')}")
    npu_student = want == "student" and cfg.student.arch == "npu"
    if for_variant(b.variant).transformer_only and (want in RNN_MODELS or npu_student):
        return (f"'bundle.variant' = {b.variant!r} is a fusion of BERT-family graphs: the {want} model has no such "
                f"file; pick another variant or {_set('bundle.variant', 'auto')}")
    return None


def _classification_exports(cfg) -> str | None:
    """The quantize and export stages' settings that need more than one key or a registry with a message."""
    q, e = cfg.quantize, cfg.export
    if q.npu_variants and not q.npu_lengths:
        return ("'quantize.npu_lengths' is empty but 'quantize.npu_variants' asks for NPU files; give the sequence "
                f"lengths to export, e.g. {_set('quantize.npu_lengths', [16, 32, 64, 128])}, or "
                f"{_set('quantize.npu_variants', [])}")
    if unknown := [v for v in e.ort_variants if v not in q.variants]:
        return (f"'export.ort_variants' names {unknown}, which 'quantize.variants' {q.variants} does not make; add "
                f"them there ({_set('quantize.variants', [*q.variants, *unknown])}) or drop them")
    if bad := [m for m in e.coreml_models if m not in COREML_MODELS]:
        return (f"'export.coreml_models' names {bad}; Core ML export is for {', '.join(COREML_MODELS)} (the teacher "
                f"is the model too big to ship): {_set('export.coreml_models', [m for m in e.coreml_models if m not in bad])}")
    return None


def _fusion_names(cfg) -> str | None:
    """A misspelt quantize.skip_fusions name, before the rules that suggest a skip_fusions list built on it."""
    if "optimized" in cfg.quantize.variants:
        from export.optimize import fusion_options

        try:
            fusion_options("bert", cfg.quantize.skip_fusions)
        except PipelineError as err:
            return str(err)
    return None


def _student_init_fits_teacher(cfg) -> str | None:
    """student.init against the student architecture, then against a local teacher folder's config."""
    from distill.student import check_init

    if cfg.student.arch == "npu" and cfg.student.init == "teacher-layers":
        return ("'student.init' = 'teacher-layers' copies BERT layers, which student.arch = 'npu' does not have (its "
                f"layer norms are decomposed); {_set('student.init', 'teacher-pca')} or 'random'")
    return teacher_problem(cfg, check_init)


def _length_fits_teacher(cfg) -> str | None:
    """The teacher stage's check (teacher.max_length within the teacher's positions), before the data stage runs."""
    return teacher_positions_problem(cfg, "teacher.max_length")


def _fine_tune_off_needs_a_classifier(cfg) -> str | None:
    """teacher.fine_tune = false uses the teacher's own classification head: a model without one (the packaged
    MiniLM is a sentence encoder) is refused by the teacher stage; refused here where the config is known."""
    if cfg.teacher.fine_tune or (teacher := teacher_config(cfg)) is None:
        return None
    if any(a.endswith("ForSequenceClassification") for a in (teacher.architectures or [])):
        return None  # whether its labels are the data's, the teacher stage checks
    return (f"'teacher.fine_tune' = false, but teacher.model '{cfg.teacher.model}' has no classification head "
            f"({', '.join(teacher.architectures or []) or 'no architecture named'}): {_set('teacher.fine_tune', True)} "
            f"to train one")


def _caps_leave_what_the_stages_need(cfg) -> str | None:
    """data.max_train keeps two examples at least (two labels); data.max_test keeps as many test texts as the
    quantize / export checks (quantize.check_samples) and the bundles' agreement gates (bundle.min_agreement)
    refuse to pass on fewer of, which they would find only after training."""
    from export.checks import agreement_texts

    d = cfg.data
    if d.max_train == 1:
        return (f"'data.max_train' = 1 keeps one example, so one label; classification needs two or more: "
                f"{_set('data.max_train', 2)}, or 0 for all")
    need = {"quantize.check_samples": cfg.quantize.check_samples,
            "bundle.min_agreement": agreement_texts(cfg.bundle.min_agreement)}
    key, n = max(need.items(), key=lambda kv: kv[1])
    if 0 < d.max_test < n:
        return (f"'data.max_test' = {d.max_test} keeps fewer test texts than {key} needs ({n}; the gates refuse to "
                f"pass on fewer): {_set('data.max_test', n)}, 0 for all, or lower {key}")
    return None
