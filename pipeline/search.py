"""Student search under a latency (and size) budget on a target: `python -m pipeline search`.

Runs the stages the search reads (data, teacher, logits) through pipeline.stage.run, then an Optuna study
kept in runs/<run>/search/study.db (a killed search resumes where it stopped). Each trial samples a student
shape (distill/search_space.py), measures a random-weight copy of it on the target first (latency and
int8-dynamic size, cached in search/measurements.json) and is pruned when over budget, before any training;
a feasible one is distilled on a short schedule and scored on the validation split (never the test split).
Outputs: search/trials.json, search/pareto.png, search/best-<target>.toml (pipeline/search_report.py).
Not a stage of the run graph yet: it writes beside the stages' folders and holds the run's lock meanwhile.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError

log = logging.getLogger("pocketformer")
NEEDS = ["data", "teacher", "logits"]  # the stages whose outputs the search reads


@dataclass(frozen=True)
class SearchRequest:
    target: str
    budget_ms: float
    max_mb: float = 0.0  # 0 = no size limit
    trials: int = 20  # total trials in the study (a resumed study runs only the missing ones)
    space: str = "default"
    fraction: float = 0.34  # share of distill.epochs each candidate trains for


def check_request(r: SearchRequest) -> None:
    from pipeline.tasks.classification.search import check_target

    check_target(r.target)
    if not r.budget_ms > 0:
        raise PipelineError(f"search --budget-ms {r.budget_ms}: give a positive latency budget in milliseconds")
    if r.max_mb < 0:
        raise PipelineError(f"search --max-mb {r.max_mb}: give a size limit in MB (> 0), or leave it out")
    if r.trials < 1:
        raise PipelineError(f"search --trials {r.trials}: give at least 1 trial")
    if not 0 < r.fraction <= 1:
        raise PipelineError(f"search --fraction {r.fraction}: give a share of distill.epochs in (0, 1]")


def study_name(cfg, r: SearchRequest) -> str:
    """One study per (target, budget, size limit, what a trial's score depends on): changing any of those
    starts a fresh study in the same study.db; the same command resumes its own."""
    from pipeline.manifest import content_key, sha256_json

    basis = {"logits": content_key(cfg.run_dir / "logits"), "distill": cfg.section_dict("distill"),
             "student": cfg.section_dict("student"), "teacher.eval_batch_size": cfg.teacher.eval_batch_size,
             "seed": cfg.run.seed, "space": r.space, "fraction": r.fraction, "bench": cfg.section_dict("bench"),
             "quantize": cfg.section_dict("quantize")}
    return f"{r.target}-{r.budget_ms:g}ms-{r.max_mb:g}mb-{sha256_json(basis)[:12]}"


def run_search(cfg, r: SearchRequest) -> dict:
    """Run (or resume) the search; returns {"best_config", "trials", "study"}."""
    from pipeline.lock import run_lock
    from pipeline.stage import run

    if cfg.run.task != "classification":
        raise PipelineError(f"search: run.task = '{cfg.run.task}' is not searchable yet (classification only)")
    check_request(r)
    from distill.search_space import get_space

    space = get_space(r.space)  # an unknown space fails before any training
    run(cfg, NEEDS)
    with run_lock(cfg.run_dir, f"search of {cfg.source or 'a config'}"):
        return _search(cfg, r, space)


def _search(cfg, r: SearchRequest, space) -> dict:
    import optuna

    from distill.search_space import sample_student, shape_of
    from pipeline.config import config_from_dict
    from pipeline.search_report import best_config, write_outputs
    from pipeline.tasks.classification.search import Candidates

    from pipeline.tasks.common import threads

    threads(cfg)  # run.threads for the candidates' training, as in the distill stage
    out = cfg.run_dir / "search"
    out.mkdir(parents=True, exist_ok=True)
    cands = Candidates(cfg, r.target, out / "measurements.json")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints (trial.set_constraint, <= 0 feasible): TPE learns where the budget cuts the space
    sampler = optuna.samplers.TPESampler(seed=cfg.run.seed)
    study = optuna.create_study(study_name=study_name(cfg, r), storage=f"sqlite:///{out / 'study.db'}",
                                direction="maximize", sampler=sampler, pruner=optuna.pruners.SuccessiveHalvingPruner(),
                                load_if_exists=True)
    _fail_interrupted(study)
    done = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]  # failed ones run again
    todo = max(0, r.trials - len(done))
    log.info("search %s: %d trial(s) in the study, %d to run", study.study_name, len(done), todo)

    def objective(trial) -> float:
        s = sample_student(trial, space, cfg.student)
        shape = shape_of(s)
        trial.set_user_attr("student", shape)
        try:  # the same load-time checks a run of this student would get
            config_from_dict({**cfg.to_dict(), "student": {**cfg.section_dict("student"), **shape}}, "search")
        except PipelineError as e:
            trial.set_user_attr("pruned_because", f"invalid student: {e}")
            _constrain(trial, 1.0, 1.0)
            raise optuna.TrialPruned() from None
        twin = _trained_twin(study, trial)
        if twin is not None:  # TPE may sample a shape again: same seed, same data, same score, so reuse it
            for key in ("latency_ms", "size_bytes", "validation_accuracy_per_rung"):
                trial.set_user_attr(key, twin.user_attrs.get(key))
            trial.set_user_attr("same_as_trial", twin.number)
            _constrain(trial, twin.user_attrs["latency_ms"] - r.budget_ms, 0.0)
            return twin.value
        m = cands.measure(s, shape)
        trial.set_user_attr("latency_ms", m["latency_ms"])
        trial.set_user_attr("size_bytes", m["size_bytes"])
        size_mb = m["size_bytes"] / 1e6
        _constrain(trial, m["latency_ms"] - r.budget_ms, size_mb - r.max_mb if r.max_mb else 0.0)
        over = []
        if m["latency_ms"] > r.budget_ms:
            over.append(f"latency {m['latency_ms']:.3f} ms > {r.budget_ms:g} ms")
        if r.max_mb and size_mb > r.max_mb:
            over.append(f"size {size_mb:.2f} MB > {r.max_mb:g} MB")
        if over:
            trial.set_user_attr("pruned_because", "over budget: " + ", ".join(over))
            raise optuna.TrialPruned()
        accs: list[float] = []

        def report(step: int, acc: float) -> None:
            accs.append(acc)
            trial.set_user_attr("validation_accuracy_per_rung", accs)
            trial.report(acc, step)
            if trial.should_prune():
                trial.set_user_attr("pruned_because", f"successive halving after rung {step + 1}")
                raise optuna.TrialPruned()

        return cands.distill(s, r.fraction, report)

    if todo:
        study.optimize(objective, n_trials=todo, catch=())
    rows = write_outputs(study, out, r)
    best = best_config(cfg, study, out, r.target)
    return {"best_config": best, "trials": rows, "study": study.study_name}


def _trained_twin(study, trial):
    """An earlier complete trial with the same parameters, or None."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.params == trial.params:
            return t
    return None


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


def add_cli(sub, common) -> None:
    """common: the CLI's --config/--set/--force adder (passed in: pipeline.cli imports this module)."""
    p = sub.add_parser("search", help="search student shapes under a latency budget on a target (runs data, "
                                      "teacher and logits first); writes runs/<run>/search/")
    common(p)
    p.add_argument("--target", required=True, help="where the budget applies: mobile-cpu or host-cpu")
    p.add_argument("--budget-ms", type=float, required=True, help="p50 latency limit, batch 1, bench.headline_length")
    p.add_argument("--max-mb", type=float, default=0.0, help="int8-dynamic file size limit in MB (default: none)")
    p.add_argument("--trials", type=int, default=20, help="trials in the study in total (a resumed one runs the rest)")
    p.add_argument("--space", default="default", help="search space (distill/search_space.py SPACES)")
    p.add_argument("--fraction", type=float, default=0.34, help="share of distill.epochs each candidate trains")


def run_cli(cfg, args) -> int:
    r = SearchRequest(args.target, args.budget_ms, args.max_mb, args.trials, args.space, args.fraction)
    result = run_search(cfg, r)
    best = result["best_config"]
    if best is None:
        print(f"search: no trial met the budget on {r.target}; see {cfg.run_dir / 'search' / 'trials.json'}")
        return 1
    print(f"best student config: {best}\nrun it with: make all CONFIG={Path(best)}")
    return 0
