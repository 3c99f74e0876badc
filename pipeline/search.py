"""Student search under a latency (and size) budget on a target: the optional stage `search` (run only when
named: `python -m pipeline search`, `make search`), after the teacher's logits are cached.

Its request is the [search] section (the CLI flags are overrides of those keys, so the stage's fingerprint has
them). The Optuna study lives in SQLite under runs/<run>/.resume/search/ while the stage runs (a killed search
resumes where it stopped) and is copied into search/ when it finishes; or in a shared database
(search.storage), where `search --worker` processes on other machines add trials to the same study. Each
trial samples a student (a transformer or a recurrent one, distill/search_space.py), measures a random-weight
copy of it on the target first (latency and int8-dynamic size, cached in measurements.json) and is pruned when
over budget, before any training; a feasible one is distilled from the cached teacher logits on a short
schedule and scored on the validation split (never the test split). The best search.survivors of those are
then trained as the pipeline would train them (the full schedule) and the best of them is the result; the
config's own student is trained the same way as the yardstick (search.reference), and the verdict says whether
the result beats it.
Outputs: search/trials.json, search/pareto.png, search/best-<target>.toml (pipeline/search_report.py),
written by the stage alone.

The per-task interface: the engine here is the same for every task; what differs is the task's candidates
class, bound as `Task.search` (pipeline/task.py; () -> the class): classification's in
pipeline/tasks/classification/search.py, generation's in pipeline/tasks/generation/search.py. It has
  METRIC, DIRECTION        the trial's score ("validation_accuracy", "maximize"; "validation_perplexity",
                           "minimize"): trials.json's column, Optuna's direction
  METRIC_NOTE, COST_NOTE,  what the score and `latency_ms` (the budgeted cost, in ms) mean, for trials.json,
  COST_SHORT, BUDGET_UNIT  the plot's axes and best-<target>.toml's header ("{target}" is filled in)
  MEASURED                 the measurement keys kept per trial (latency_ms and size_bytes first)
  space(name)              the task's search space of that name (distill/search_space.py)
  basis(cfg)               the task's settings a trial's score depends on beyond the shared ones (study name)
  over_budget(m, budget)   the "over budget" text for a measurement over the budget
  apply_best(data, shape, variant)  the best shape (and the file it ships) written into the config dict of
                           best-<target>.toml
  Candidates(cfg, target, cache_path) with sample(trial, space) -> a config section, shape_of(s) -> dict,
  section(s) -> its config section's name, check_init(student, teacher_config) the teacher stage's check that
  the student's init fits the teacher, measure(s, shape, variant) -> {MEASURED...} of that quantized file
  before any training and distill(s, fraction, report, score_variant) -> the score after the short schedule
  (report(rung, score) per rung; score_variant None: the trained model's, else that quantized file's);
  for search.npu_compile (classification only) npu_gate(s, shape) -> ({chip: verdict}, prune reason or None);
  for the survivors candidate_of(shape) -> its config section and full_schedule(s, score_variant) -> the
  score after the training the pipeline's stages give that config.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import time
import warnings
from contextlib import closing
from dataclasses import asdict, replace
from pathlib import Path

from pipeline.config import SearchSection
from pipeline.errors import PipelineError
from pipeline.manifest import write_whole
from pipeline.search_checks import DEFAULT_VARIANTS
from pipeline.search_report import best_config, best_trial, write_outputs

log = logging.getLogger("pocketformer")
NEEDS = ["data", "teacher", "logits"]  # the stages whose outputs the search reads (its deps in the graph)
# the stage's files that outlive a run of it: seeded into the next run's workspace (a larger --trials resumes)
KEPT = ("study.db", "measurements.json", "survivors.json")


def request_of(cfg) -> SearchSection:
    """cfg.search as a request (its variants a tuple without repeats); the keys left "not set" (target,
    budget) are one error naming the flag."""
    s = cfg.search
    if not s.target:
        raise PipelineError("search: no target: give --target mobile-cpu (or host-cpu), or set search.target")
    if not s.budget_ms > 0:
        raise PipelineError("search: no latency budget: give --budget-ms (a positive latency budget in "
                            "milliseconds), or set search.budget_ms")
    d = cfg.data  # candidates are scored on the validation split: one no setting makes fails after the logits stage
    if d.validation_fraction == 0 and not d.validation_path and d.source != "hub":
        raise PipelineError("search: candidates are scored on the validation split, and data.validation_fraction = 0 "
                            "with no data.validation_path leaves it empty: --set data.validation_fraction=0.1, or "
                            "give data.validation_path")
    return replace(s, variants=tuple(dict.fromkeys(s.variants)))


def check_npu(r: SearchSection) -> None:
    """search.npu_compile needs Qualcomm's HTP compiler (onnxruntime-qnn): one error before any stage runs when
    it cannot run here (never a search that silently drops the gate)."""
    from eval.qnn import unavailable_reason

    if r.npu_compile and (why := unavailable_reason()):
        raise PipelineError(f"search.npu_compile = true compiles every candidate for the HTP, but {why}; or set "
                            f"search.npu_compile = false")


def searcher_of(cfg) -> type:
    """The run's task's candidates class (Task.search), or one error when the task has no search."""
    from pipeline.tasks import task_of

    task = task_of(cfg)
    if task.search is None:
        raise PipelineError(f"search: run.task = '{cfg.run.task}' is not searchable yet")
    return task.search()


def study_name(cfg, r: SearchSection, searcher: type | None = None) -> str:
    """One study per (target, budget, size limit, what a trial's score depends on): changing any of those
    starts a fresh study in the same storage; the same request resumes its own. In the run folder's own
    SQLite the logits are keyed by their content; in a shared storage by the settings that make them (the
    same on every machine: each machine caches its own logits)."""
    from pipeline.manifest import content_key, sha256_json
    from pipeline.stage import STAGES, config_hash

    searcher = searcher or searcher_of(cfg)
    upstream = ({n: config_hash(cfg, STAGES[n])[1] for n in NEEDS} if r.storage
                else content_key(cfg.run_dir / "logits"))
    basis = {"logits": upstream, "distill": cfg.section_dict("distill"), "baseline": cfg.section_dict("baseline"),
             "student": cfg.section_dict("student"), "teacher.eval_batch_size": cfg.teacher.eval_batch_size,
             "teacher.max_length": cfg.teacher.max_length, "seed": cfg.run.seed,
             "space": [r.space, asdict(searcher.space(r.space))], "fraction": r.fraction,
             "bench": cfg.section_dict("bench"), "quantize": cfg.section_dict("quantize"), **searcher.basis(cfg)}
    if r.npu_compile:  # only then: the studies of searches without the gate keep their names
        basis["npu_compile"] = sorted(set(cfg.npu.chips))
    if r.variants != DEFAULT_VARIANTS:  # likewise: int8-dynamic alone keeps the names of earlier studies
        basis["variants"] = list(r.variants)
    if r.seed and r.seed != cfg.run.seed:  # and a sampler seeded by run.seed keeps them too
        basis["sampler_seed"] = r.seed
    return f"{r.target}-{r.budget_ms:g}ms-{r.max_mb:g}mb-{sha256_json(basis)[:12]}"


def rungs(epochs: float, fraction: float) -> list[float]:
    """The short schedule: fraction * epochs, cut into rungs of at most one epoch each."""
    total = max(epochs * fraction, 1e-3)
    n = max(1, math.ceil(total - 1e-9))
    return [total / n] * n


def measurement_basis(cfg) -> str:
    """What a candidate's measured file depends on beyond its shape and target: the teacher, its tokenizer and
    the distillation texts (the vocabulary it keeps), all in the logits stage's content key, and how the file
    is quantized. In a measurement's cache key, so a changed teacher, data or [quantize] re-measures (a cached
    size from another teacher's vocabulary once let an over-limit student through search.max_mb)."""
    from pipeline.manifest import content_key, sha256_json

    return sha256_json({"logits": content_key(cfg.run_dir / "logits"),
                        "quantize": cfg.section_dict("quantize")})[:16]


def _read_json(path: Path | None) -> dict:
    return json.loads(path.read_text()) if path and path.is_file() else {}


class MeasurementCache:
    """The candidates classes' shared mechanics: measurements.json (pre-training measurements keyed by what
    decides them) loaded once and rewritten whole after each new entry, and the short schedule's rungs."""

    def _load_cache(self, cfg, cache_path: Path | None) -> None:
        self.cfg = cfg
        self.cache_path = cache_path  # None: measurements kept in memory only (a worker of a shared study)
        self.cache = _read_json(cache_path)

    def _save(self) -> None:
        if self.cache_path is not None:  # else measurements kept in memory only
            write_whole(self.cache_path, json.dumps(self.cache, indent=1, sort_keys=True))

    def rungs(self, fraction: float) -> list[float]:
        """The short schedule: fraction * distill.epochs, cut into rungs of at most one epoch each."""
        return rungs(self.cfg.distill.epochs, fraction)


# --- the stage ----------------------------------------------------------------------------------------------
def stage_search(ctx) -> dict:
    """Every searchable task's step for `search`: run (or resume) the study until it holds search.trials
    finished trials, then write the outputs into the stage's folder."""
    cfg = ctx.cfg
    searcher = searcher_of(cfg)
    r = request_of(cfg)
    space = searcher.space(r.space)
    work = ctx.resume_dir  # kept across a kill, removed by the runner when the stage has finished
    work.mkdir(parents=True, exist_ok=True)
    for name in KEPT:  # the previous finished search's study and measurements: a larger --trials resumes it
        if not (work / name).exists() and (ctx.run_dir / "search" / name).is_file():
            shutil.copy2(ctx.run_dir / "search" / name, work / name)
    url = r.storage or f"sqlite:///{work / 'study.db'}"
    study, cands = run_trials(cfg, r, space, url, work / "measurements.json", searcher)
    full = run_survivors(r, study, cands, work / "survivors.json")
    ref = run_reference(r, study, cands, work / "survivors.json") if full and r.reference else None
    if ref:
        retime_against_reference(study, cands, full, ref, r.select)
    doc = write_outputs(study, ctx.out, r, cands, full, ref)
    rows = doc["trials"]
    best = best_config(cfg, study, ctx.out, r.target, cands, full, doc)
    for name in ("measurements.json", "survivors.json"):
        if (work / name).is_file():
            shutil.copy2(work / name, ctx.out / name)
    if not r.storage:
        _copy_sqlite(work / "study.db", ctx.out / "study.db")
    finished = [t for t in rows if t["status"] in ("complete", "pruned")]
    return {"study": study.study_name, "storage": "run folder" if not r.storage else _redacted(r.storage),
            "trials": len(finished), "complete": sum(t["status"] == "complete" for t in rows),
            "best_trial": doc["best_trial"], "best_config": best.name if best else None, "verdict": doc["verdict"],
            "workers": sorted({t["worker"] for t in rows if t.get("worker")})}


def run_trials(cfg, r: SearchSection, space, url: str, cache_path: Path | None, searcher: type):
    """Open (or resume) the study and run trials until it holds r.trials finished (complete or pruned) ones,
    whoever ran them. Returns (the study, the candidates object)."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    from pipeline.tasks.common import threads

    check_npu(r)
    threads(cfg)  # run.threads for the candidates' training, as in the distill stage
    cands = searcher(cfg, r.target, cache_path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints (trial.set_constraint, <= 0 feasible): TPE learns where the budget cuts the space.
    # multivariate + group: the space is conditional (an arch's own parameters), which independent TPE models
    # badly; a third of the trials sampled at random first: with the defaults (10, independent) the demo's
    # 45-trial half-budget search re-sampled shapes it had trained in 21 trials (same_as_trial), training 4
    with warnings.catch_warnings():  # "experimental" options in Optuna 5.0 (pinned): not the user's concern
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=r.seed or cfg.run.seed, multivariate=True, group=True,
                                             n_startup_trials=max(10, r.trials // 3))
    study = optuna.create_study(study_name=study_name(cfg, r, searcher), storage=_storage(url, shared=bool(r.storage)),
                                direction=searcher.DIRECTION, sampler=sampler,
                                pruner=optuna.pruners.SuccessiveHalvingPruner(), load_if_exists=True)
    if not r.storage:
        _fail_interrupted(study)  # the run lock says no other process uses this study
    finished = (TrialState.COMPLETE, TrialState.PRUNED)  # failed ones run again
    done = len(study.get_trials(deepcopy=False, states=finished))
    todo = max(0, r.trials - done)
    log.info("search %s: %d trial(s) in the study, %d to run", study.study_name, done, todo)
    if todo:
        study.optimize(_objective(cfg, r, space, study, cands), n_trials=todo, catch=(),
                       callbacks=[MaxTrialsCallback(r.trials, states=finished), _progress(r, cands)])
    return study, cands


def run_survivors(r: SearchSection, study, cands, cache_path: Path) -> dict[int, float]:
    """{trial number: score after the full schedule} for the survivors. The short schedule ranks shapes
    cheaply but loosely (on the demo, validation scores of the top shapes sat within noise of each other and the
    best-ranked one was not the best once trained in full), so the best few are trained as the pipeline would
    train them and the result is the best of those. The survivors: the r.survivors best complete trials by
    their short-schedule score (ties: faster, then earlier)."""
    sign = 1.0 if cands.DIRECTION == "maximize" else -1.0
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    picks = sorted(complete, key=lambda t: (-sign * t.value, t.user_attrs.get("latency_ms", 0.0), t.number))
    picks = picks[: r.survivors]
    metric = cands.METRIC.replace("_", " ")
    out = {}
    for i, t in enumerate(picks, 1):
        out[t.number] = _full_score(r, study, cands, cache_path, t.user_attrs["student"],
                                    t.user_attrs.get("variant", r.variants[0]),
                                    f"[search] survivor {i}/{len(picks)}: trial {t.number} on the full schedule "
                                    f"({metric} {t.value:.4f} after the short one)")
        print(f"[search] survivor {i}/{len(picks)}: trial {t.number}: {metric} {out[t.number]:.4f} after the full "
              f"schedule", flush=True)
    return out


def _full_score(r: SearchSection, study, cands, cache_path: Path, shape: dict, variant: str, starting: str) -> float:
    """The score of shape after the full schedule (starting: the line printed before training it). Cached in
    survivors.json per (study, shape, variant), written after each: a resumed or repeated search retrains
    nothing it has trained."""
    cache = _read_json(cache_path)
    key = json.dumps({"study": study.study_name, "student": shape, "variant": variant}, sort_keys=True)
    if key not in cache:
        print(starting, flush=True)
        # as a trial: the file's own score unless int8-dynamic alone
        cache[key] = cands.full_schedule(cands.candidate_of(shape), variant if r.variants != DEFAULT_VARIANTS else None)
        write_whole(cache_path, json.dumps(cache, indent=1, sort_keys=True))
    return cache[key]


def run_reference(r: SearchSection, study, cands, cache_path: Path) -> dict:
    """The config's own [student], measured on the target as a trial is (r.variants[0]) and trained on the full
    schedule as a survivor is: {"student": shape, "variant", latency and size (cands.MEASURED), "<METRIC>_full"}.
    The yardstick for the result: a search whose best survivor scores below it has found nothing better than
    the config already has. Its score is cached in survivors.json beside the survivors' (a survivor of the
    same shape shares it)."""
    s = cands.candidate_of(cands.shape_of(cands.cfg.student))
    shape, variant = cands.shape_of(s), r.variants[0]
    m = cands.measure(s, shape, variant)
    score = _full_score(r, study, cands, cache_path, shape, variant,
                        "[search] reference: the config's own [student] on the full schedule")
    metric = cands.METRIC.replace("_", " ")
    print(f"[search] reference: the config's own [student]: {metric} {score:.4f} after the full schedule, "
          f"{m['latency_ms']:.3f} {cands.COST_SHORT.format(target=r.target)}, {m['size_bytes'] / 1e6:.2f} MB "
          f"{variant}", flush=True)
    return {"student": shape, "variant": variant, **{k: m[k] for k in cands.MEASURED},
            f"{cands.METRIC}_full": score}


def retime_against_reference(study, cands, full: dict[int, float], ref: dict, select: str = "best") -> None:
    """ref["latency_ratio"]: the result's latency over the reference's, timed in alternating rounds in one
    process (cands.compare_latency) rather than from two measurements taken minutes apart; tasks that cannot
    (generation: decode timing) keep the ratio of the cached measurements."""
    best = best_trial(study, cands, full, select)
    if best is None or not hasattr(cands, "compare_latency"):
        return
    shape, variant = best.user_attrs["student"], best.user_attrs.get("variant", ref["variant"])
    mine = (cands.candidate_of(shape), shape, variant)
    theirs = (cands.candidate_of(ref["student"]), ref["student"], ref["variant"])
    ref["latency_ratio"] = lr = cands.compare_latency(theirs, mine)
    print(f"[search] trial {best.number} against the reference, {lr['rounds']} alternating rounds: "
          f"{lr['ratio']:.3f}x its p50 (rounds {lr['ratio_range'][0]:.3f}-{lr['ratio_range'][1]:.3f})", flush=True)


def _objective(cfg, r: SearchSection, space, study, cands):
    import optuna

    from transformers import AutoConfig

    from distill.search_space import config_keys
    from pipeline.config import config_from_dict

    worker = f"{socket.gethostname()}:{os.getpid()}"
    teacher = AutoConfig.from_pretrained(cfg.run_dir / "teacher" / "model")  # what student.init copies from
    per_rung = f"{cands.METRIC}_per_rung"

    def objective(trial) -> float:
        trial.set_user_attr("worker", worker)
        s = cands.sample(trial, space)
        # the quantized file it ships: a sampled dimension only when search.variants names more than one (a single
        # variant samples nothing, so such a study's trials are the same as before the option existed)
        variant = (trial.suggest_categorical("variant", list(r.variants)) if len(r.variants) > 1
                   else r.variants[0])
        trial.set_user_attr("variant", variant)
        shape = cands.shape_of(s)
        trial.set_user_attr("student", shape)
        section = cands.section(s)
        try:  # the same load-time checks a run of this candidate would get, and the teacher stage's init check
            run = config_from_dict({**cfg.to_dict(), section: {**cfg.section_dict(section), **config_keys(shape)}},
                                   "search")
            if section == "student":
                cands.check_init(run.student, teacher)
        except PipelineError as e:
            trial.set_user_attr("pruned_because", f"invalid student: {e}")
            _constrain(trial, 1.0, 1.0)
            raise optuna.TrialPruned() from None
        twin = _trained_twin(study, trial)
        if twin is not None:  # TPE may sample a trained shape again: same seed, same data, same score
            for key in (*cands.MEASURED, per_rung):
                trial.set_user_attr(key, twin.user_attrs.get(key))
            trial.set_user_attr("same_as_trial", twin.number)
            if "htp" in twin.user_attrs:
                trial.set_user_attr("htp", twin.user_attrs["htp"])
            _constrain(trial, twin.user_attrs["latency_ms"] - r.budget_ms, 0.0)
            # Pruned, not given the score again: a repeated good score made TPE sample that one shape over and
            # over (21 of 45 trials in a demo search); its score stands on the earlier trial
            trial.set_user_attr("pruned_because", f"same shape as trial {twin.number} (scored there)")
            raise optuna.TrialPruned()
        m = cands.measure(s, shape, variant)
        for key in cands.MEASURED:
            trial.set_user_attr(key, m[key])
        size_mb = m["size_bytes"] / 1e6
        _constrain(trial, m["latency_ms"] - r.budget_ms, size_mb - r.max_mb if r.max_mb else 0.0)
        over = []
        if m["latency_ms"] > r.budget_ms:
            over.append(cands.over_budget(m, r.budget_ms))
        if r.max_mb and size_mb > r.max_mb:
            over.append(f"size {size_mb:.2f} MB > {r.max_mb:g} MB")
        if over:
            trial.set_user_attr("pruned_because", "over budget: " + ", ".join(over))
            raise optuna.TrialPruned()
        if r.npu_compile:  # after the budget: an over-budget candidate is not compiled
            verdicts, refused = cands.npu_gate(s, shape)
            trial.set_user_attr("htp", verdicts)
            if refused:
                trial.set_user_attr("pruned_because", refused)
                raise optuna.TrialPruned()
        scores: list[float] = []

        def report(step: int, score: float) -> None:
            scores.append(score)
            trial.set_user_attr(per_rung, scores)
            trial.report(score, step)
            if trial.should_prune():
                trial.set_user_attr("pruned_because", f"successive halving after rung {step + 1}")
                raise optuna.TrialPruned()

        # a file other than int8-dynamic alone (or several): the files differ in accuracy too, so the score is
        # the trained candidate's own file's; int8-dynamic alone keeps the earlier studies' PyTorch score
        return cands.distill(s, r.fraction, report, variant if r.variants != DEFAULT_VARIANTS else None)

    return objective


def _progress(r: SearchSection, cands):
    """One line per finished trial (Optuna's own log is silenced): what was tried, what it cost, how it ended,
    so a long search can be followed without reading trials.json."""
    from optuna.trial import TrialState

    metric = cands.METRIC.replace("_", " ")

    def line(study, t) -> None:
        u = t.user_attrs
        shape = ", ".join(f"{k}={v}" for k, v in sorted(t.params.items()))
        cost = (f"{u['latency_ms']:.3f} {cands.BUDGET_UNIT} (budget {r.budget_ms:g}), {u['size_bytes'] / 1e6:.2f} MB"
                if u.get("latency_ms") is not None else "not measured")
        if t.state == TrialState.COMPLETE:
            how = f"{metric} {t.value:.4f}"
        else:
            how = f"{t.state.name.lower()}: {u.get('pruned_because', 'see trials.json')}"
        done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
        print(f"[search] trial {t.number} ({done}/{r.trials}): {shape}: {cost}; {how}", flush=True)

    return line


def _storage(url: str, *, shared: bool):
    """Optuna's RDB storage for url. SQLite waits for a busy file instead of failing at once (workers write it
    in turn); a shared storage keeps heartbeats, so a trial of a killed worker is failed by the next one after
    the grace period (in the run folder's own SQLite the run lock says that at once: _fail_interrupted)."""
    import optuna

    kw: dict = {"engine_kwargs": {"connect_args": {"timeout": 120}}} if url.startswith("sqlite") else {}
    if shared:
        kw.update(heartbeat_interval=30, grace_period=120)
    for attempt in range(5):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5.0 (pinned): not the user's concern
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kw)
        except Exception as e:  # a bad URL, a missing driver, an unreachable server: SQLAlchemy's many errors
            # workers starting together race to create the tables of a new database: the loser retries
            if attempt < 4 and type(e).__name__ in ("OperationalError", "IntegrityError"):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise PipelineError(f"search.storage {_redacted(url)!r}: cannot open the study's database "
                                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); check the URL, "
                                f"the database server and its driver") from None


def _redacted(url: str) -> str:
    """url without a password (it lands in the manifest and in messages)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("://", 1)[0] + "://..."


def _copy_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of an SQLite file (the backup API: no half-written page even if a connection is open)."""
    import sqlite3

    with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(dst)) as b:
        a.backup(b)


def _trained_twin(study, trial):
    """An earlier complete trial with the same parameters, or None."""
    from optuna.trial import TrialState

    return next((t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                 if t.params == trial.params), None)


def _constrain(trial, latency_over_ms: float, size_over_mb: float) -> None:
    """TPE's constraints (<= 0 is feasible): how far the trial is over the latency budget and the size limit."""
    trial.set_constraint("latency_over_ms", latency_over_ms)
    trial.set_constraint("size_over_mb", size_over_mb)


def _fail_interrupted(study) -> None:
    """Trials left RUNNING by a killed search (the run lock says no other search is live) become FAIL, so
    they neither count as done nor block the count; their shapes may be sampled again."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        log.info("search: trial %d was interrupted; marked failed", t.number)


# --- entry points -------------------------------------------------------------------------------------------
def run_search(cfg, force: bool = False) -> dict:
    """Run the stage `search` (and what it needs) through the runner; returns its manifest's summary."""
    from pipeline.manifest import read_manifest
    from pipeline.stage import run

    searcher = searcher_of(cfg)  # a task without a search fails first
    r = request_of(cfg)
    check_npu(r)  # a missing target, budget or HTP compiler fails before data, teacher and logits run
    searcher.space(r.space)  # so does a search space written wrong (get_space's checks)
    run(cfg, ["search"], force=("search",) if force else ())
    return read_manifest(cfg.run_dir / "search")["summary"]


def run_worker(cfg) -> dict:
    """`search --worker`: add trials to the shared study (search.storage) until it holds search.trials finished
    ones. Runs data, teacher and logits first where they are not up to date; writes nothing else in the run
    folder (the stage, run once anywhere, writes the outputs)."""
    from pipeline.stage import run, statuses

    searcher = searcher_of(cfg)
    r = request_of(cfg)
    check_npu(r)
    if not r.storage:
        raise PipelineError("search --worker adds trials to a shared study: set search.storage to a database URL "
                            "every worker reaches (e.g. --set search.storage='\"sqlite:////shared/study.db\"')")
    space = searcher.space(r.space)
    if not all(fresh for fresh, _ in statuses(cfg, NEEDS).values()):
        run(cfg, NEEDS)
    study, _ = run_trials(cfg, r, space, r.storage, None, searcher)
    return {"study": study.study_name, "trials": len(study.trials)}


# the flags' argparse dests, each the name of its [search] key
FLAGS = ("target", "budget_ms", "max_mb", "trials", "space", "fraction", "storage", "variants", "survivors",
         "reference", "seed")


def flag_overrides(args) -> dict[str, str]:
    """The flags given, as --set overrides of [search] (after the config's and --set's, so they win), each
    with the flag as typed, which an error about its value names."""
    given = {key: getattr(args, key) for key in FLAGS if getattr(args, key, None) is not None}
    for key, value in given.items():  # argparse takes "nan" and "inf" as floats: name the flag, not a --set
        if isinstance(value, float) and not math.isfinite(value):
            raise PipelineError(f"search {_as_typed(key, value)}: give a finite number")
    return {f"search.{key}={json.dumps(value)}": _as_typed(key, value) for key, value in given.items()}


def _as_typed(key: str, value) -> str:
    """The flag that set key to value, as on the command line: --no-reference, --variants a b, --trials 0."""
    if value is False:  # the store_false flags
        return f"--no-{key.replace('_', '-')}"
    return " ".join([f"--{key.replace('_', '-')}", *map(str, value if isinstance(value, list) else [value])])


def add_cli(sub) -> None:
    from pipeline.cli_args import common_options

    p = sub.add_parser("search", help="the optional stage search: student shapes under a latency budget on a "
                                      "target (runs data, teacher and logits first); writes runs/<run>/search/")
    common_options(p)
    p.add_argument("--target", help="where the budget applies: mobile-cpu or host-cpu (search.target)")
    p.add_argument("--budget-ms", type=float, help="p50 latency limit, batch 1, bench.headline_length; for "
                                                   "generation, ms per decode token (search.budget_ms)")
    p.add_argument("--max-mb", type=float, help="int8-dynamic file size limit in MB (search.max_mb; default none)")
    p.add_argument("--trials", type=int, help="finished trials in the study in total (search.trials, default 20)")
    p.add_argument("--space", help="search space, distill/search_space.py SPACES (search.space)")
    p.add_argument("--fraction", type=float, help="share of distill.epochs each candidate trains (search.fraction)")
    p.add_argument("--storage", help="a shared study database, an SQLAlchemy URL (search.storage)")
    p.add_argument("--variants", nargs="+", metavar="VARIANT",
                   help="quantized files a candidate may ship: int8-dynamic (default), int8-static, fp16, fp32; "
                        "more than one makes the variant a search dimension (search.variants)")
    p.add_argument("--survivors", type=int, help="the best trained trials retrained on the full schedule; the "
                                                  "best of them is the result (search.survivors, default 3; 0: "
                                                  "the best short-schedule score)")
    p.add_argument("--seed", type=int, help="the sampler's seed (search.seed; default run.seed): another seed, "
                                            "another study of the same request")
    p.add_argument("--no-reference", dest="reference", action="store_false", default=None,
                   help="do not train the config's own [student] as the yardstick (search.reference = false)")
    p.add_argument("--worker", action="store_true", help="only add trials to the shared study (search.storage) "
                                                         "until it holds --trials; the stage writes the outputs")


def run_cli(cfg, args) -> int:
    if args.worker:
        done = run_worker(cfg)
        print(f"search worker: study {done['study']} holds {done['trials']} trial(s); run `search` without "
              f"--worker (once, anywhere) to write the outputs")
        return 0
    summary = run_search(cfg, force=args.force)
    folder = cfg.run_dir / "search"
    if summary["best_config"] is None:
        rows = _read_json(folder / "trials.json").get("trials", [])
        invalid = [t["pruned_because"] for t in rows if str(t.get("pruned_because")).startswith("invalid student")]
        why = (f"every candidate was a student this config cannot build ({invalid[0]})"
               if rows and len(invalid) == len(rows) else f"no trial met the budget on {cfg.search.target}")
        print(f"search: {why}; see {folder / 'trials.json'}")
        return 1
    best = folder / summary["best_config"]
    if summary.get("verdict"):
        print(f"search: {summary['verdict']}")
    dist = Path(cfg.bundle.dist_dir) / cfg.run.name
    # the file keeps run.name: a run of it reuses this run's data, teacher and logits (minutes saved) and
    # replaces its student, report and bundle; said here, so the replacement is never a surprise
    print(f"best student config: {best}\nrun it with: make all CONFIG={best}\n  (run.name is "
          f"{cfg.run.name!r}: it reuses {cfg.run_dir}'s data, teacher and logits and replaces its student, report "
          f"and {dist}; to keep them, add SET='run.name=\"{cfg.run.name}-{cfg.search.target}\"', which "
          f"trains a new run from its data)")
    return 0
