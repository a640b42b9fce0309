"""The detection trainer: Detectron2's DefaultTrainer with the plugin's checkpointer, evaluators and outputs.

Detectron2's DefaultTrainer constructor runs unchanged; what differs goes through its extension points, each for a
reason:
- BackbonesCheckpointer: safe reading of every file, pretrained backbones in any format, atomic writes;
- the optimizer state is part of the checkpoint (0.6 loses SGD momentum on resume, detectron2 issue #4110);
- DistributedDataParallel without `device_ids` on CPU (Detectron2 always passes a GPU id), so gloo runs work;
- Detectron2's writers: metrics.json is its JSONWriter log (the evaluation scalars in it, as its EvalHook puts
  them; an undefined one as null: engine/writers.py), TensorBoard events beside it; a progress bar with ETA on rank 0;
- the run's summary, OUTPUT_DIR/evaluation.json: the evaluation results by dataset and what a model-zoo table
  reports -- inference seconds per image (the model's forward in eval mode at the test loader's batch 1, loader
  excluded), peak training memory, parameters, and the device and threads they were measured on (train s/iter comes
  from the metrics.json log, detection.report.runs reads it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import time
import weakref
from collections import OrderedDict

import torch
from detectron2.engine import DefaultTrainer, hooks
from detectron2.engine import defaults as d2_defaults
from detectron2.engine.defaults import create_ddp_model as d2_create_ddp_model
from detectron2.engine.train_loop import TrainerBase
from detectron2.evaluation import inference_on_dataset, print_csv_format
from detectron2.utils import comm
from detectron2.utils.events import get_event_storage

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.engine.progress import ProgressFile, progress_bar
from classification.engine.run_files import EVALUATION, FAILURE, INFERENCE_DIR

from ..checkpoint import CLASSES_KEY, BackbonesCheckpointer, check_checkpoint_classes, dataset_classes
from ..evaluation import build_evaluator
from ..modeling.inference import compile_seconds, optimize_detector_for_inference
from .data import build_test_loader, build_train_loader, check_test_datasets
from .optimizer import build_optimizer
from .writers import run_writers

__all__ = ["Trainer", "create_ddp_model", "write_evaluation"]

logger = logging.getLogger("detection.engine")


def create_ddp_model(model: torch.nn.Module, **kwargs) -> torch.nn.Module:
    """Detectron2's create_ddp_model, told that a CPU model has no device ids (it defaults to the local GPU); buffers
    not broadcast unless asked (as DefaultTrainer asks)."""
    kwargs.setdefault("broadcast_buffers", False)
    if not next(model.parameters()).is_cuda:
        kwargs.setdefault("device_ids", None)
    return d2_create_ddp_model(model, **kwargs)


@contextlib.contextmanager
def cpu_ddp_without_device_ids():
    """DefaultTrainer's constructor wraps the model with detectron2.engine.defaults.create_ddp_model, which passes
    DistributedDataParallel device_ids=[local rank] -- a GPU id, refused for a CPU model (gloo runs). While the
    constructor runs, that name is `create_ddp_model` above: no device ids for a CPU model, nothing else changed."""
    original = d2_defaults.create_ddp_model
    d2_defaults.create_ddp_model = create_ddp_model
    try:
        yield
    finally:
        d2_defaults.create_ddp_model = original


class ProgressBar(hooks.HookBase):
    """A tqdm bar on the main process (iteration, ETA, smoothed total loss) and OUTPUT_DIR/progress.json."""

    def before_train(self):
        self._file = ProgressFile(self.trainer.cfg.OUTPUT_DIR, self.trainer.max_iter, self.trainer.start_iter)
        self._bar = progress_bar(self.trainer.max_iter, self.trainer.start_iter, "train", dynamic_ncols=True)

    def after_step(self):
        storage = get_event_storage()
        if "total_loss" in storage.histories():
            self._bar.set_postfix(loss=f"{storage.history('total_loss').median(10):.3f}", refresh=False)
        self._bar.update(1)
        self._file.update(self.trainer.iter + 1, force=self.trainer.iter + 1 == self.trainer.max_iter)

    def after_train(self):
        self._bar.close()


class FiniteWeightsGuard(hooks.HookBase):
    """Before each periodic checkpoint: stop if a parameter became inf/NaN, so the last checkpoint stays good.

    Detectron2 already stops when a *loss* is non-finite (naming the iteration and loss terms); an update can
    make the weights non-finite one step earlier, and that step's checkpoint would be the last one.
    """

    def __init__(self, period: int, max_iter: int):
        self.period, self.max_iter = period, max_iter

    def after_step(self):
        it = self.trainer.iter
        if (it + 1) % self.period and it < self.max_iter - 1:
            return
        bad = [n for n, p in self.trainer.model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            last = self.trainer.checkpointer.get_checkpoint_file() or "none yet"
            raise FloatingPointError(f"parameters became inf/NaN at iteration {it} ({len(bad)} tensors, e.g. "
                                     f"{bad[:3]}); not saving; the last good checkpoint is {last}")


class ForwardTimer:
    """Seconds spent in `model`'s forward calls (forward hooks; the loader and evaluator are outside them), the
    first `warmup` calls left out as Detectron2's inference_on_dataset does for its own figure."""

    def __init__(self, model: torch.nn.Module, warmup: int = 5, excluded=lambda: 0.0):
        """excluded(): cumulative seconds inside the forward that are not inference (the fast path's compiles at
        new input shapes); what it grows by during a timed call is left out."""
        self.model, self.warmup, self.calls, self.seconds, self._t0 = model, warmup, 0, 0.0, None
        self.excluded = excluded

    def __enter__(self):
        sync = torch.cuda.synchronize if next(self.model.parameters()).is_cuda else (lambda: None)

        def before(*_):  # on a GPU, queued work before and inside the forward is counted where it belongs
            sync()
            self._t0 = (time.perf_counter(), self.excluded())

        def after(*_):
            sync()
            self.calls += 1
            if self.calls > self.warmup:
                self.seconds += time.perf_counter() - self._t0[0] - (self.excluded() - self._t0[1])

        self._hooks = [self.model.register_forward_pre_hook(before), self.model.register_forward_hook(after)]
        return self

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()

    @property
    def per_call(self) -> float | None:
        timed = self.calls - self.warmup
        return self.seconds / timed if timed > 0 else None


def measured_on(cfg) -> dict:
    """The device and threads a timing or memory figure was measured on (every such figure carries them)."""
    device = str(cfg.MODEL.DEVICE)
    if device.startswith("cuda") and torch.cuda.is_available():
        device = f"{device} ({torch.cuda.get_device_name()})"
    return {"device": device, "threads": torch.get_num_threads(), "processes": comm.get_world_size()}


def peak_training_memory(cfg) -> dict:
    """Peak memory of this process so far, read after training's final evaluation: torch.cuda.max_memory_allocated
    on a GPU (what mmdetection reports), on a CPU the process's peak resident set (Python, Detectron2, the model, its
    training and that evaluation; not data-loader worker processes; rank 0 only under DDP)."""
    if str(cfg.MODEL.DEVICE).startswith("cuda") and torch.cuda.is_available():
        return {"peak_memory_mb": torch.cuda.max_memory_allocated() / 2**20,
                "memory_measure": "torch.cuda.max_memory_allocated"}
    return {"peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "memory_measure": "peak resident set of the training process (rank 0, its final evaluation included, "
                              "loader workers not)"}


def dataset_files(name: str) -> dict:
    """Where a registered dataset's annotations and images are (what a report needs to draw ground truth)."""
    from detectron2.data import MetadataCatalog

    meta = MetadataCatalog.get(name)
    return {k: getattr(meta, k) for k in ("json_file", "image_root", "dirname", "split", "evaluator_type")
            if hasattr(meta, k)}


def write_evaluation(output_dir: str, results: dict, extra: dict | None = None) -> str:
    """OUTPUT_DIR/evaluation.json: {"evaluation": {dataset: {task: {metric: value}}}, ...extra}, atomically."""
    path = os.path.join(output_dir, EVALUATION)
    atomic_write_text(path, strict_json({"evaluation": results, **(extra or {})}))  # NaN AP (no objects) as null
    return path


class Trainer(DefaultTrainer):
    """DefaultTrainer, extended through its own extension points (build_* classmethods, build_hooks, test,
    state_dict): Detectron2's constructor runs as it is, so a release that changes it needs nothing here."""

    def __init__(self, cfg):
        check_test_datasets(cfg)  # now, not after training
        if cfg.SOLVER.AMP.ENABLED and not torch.cuda.is_available():  # AMPTrainer needs CUDA; say so, then train
            logger.warning("SOLVER.AMP.ENABLED is ignored: no CUDA here, this run trains in float32")
            cfg = cfg.clone()
            cfg.defrost()
            cfg.SOLVER.AMP.ENABLED = False
            cfg.freeze()
        self.classes = dataset_classes(cfg.DATASETS.TRAIN[0])  # recorded in every checkpoint (state_dict)
        with cpu_ddp_without_device_ids():
            super().__init__(cfg)

    def build_hooks(self):
        # DefaultTrainer's constructor has no build_checkpointer: build_hooks is the first method it calls after
        # making its DetectionCheckpointer and before any hook holds it, so ours (same model and directory) goes in
        # here -- safe reading of every file, pretrained backbones in any format, atomic writes.
        self.checkpointer = BackbonesCheckpointer(self.checkpointer.model, self.cfg.OUTPUT_DIR,
                                                  trainer=weakref.proxy(self),
                                                  strict_backbone=self.cfg.MODEL.BACKBONES.STRICT_LOAD)
        ret = super().build_hooks()
        if comm.is_main_process():
            ckpt = next(i for i, h in enumerate(ret) if isinstance(h, hooks.PeriodicCheckpointer))
            ret.insert(ckpt, FiniteWeightsGuard(self.cfg.SOLVER.CHECKPOINT_PERIOD, self.max_iter))
            ret.insert(-1, ProgressBar())  # before the writers, after the checkpointer
        return ret

    def resume_or_load(self, resume: bool = True):
        super().resume_or_load(resume=resume)
        if self.start_iter:  # continue the sample stream where the checkpointed run was, not from its start
            self._trainer.data_loader.set_start(self.start_iter * self.cfg.SOLVER.IMS_PER_BATCH)

    def train(self):
        """Detectron2's training loop, with the outcome recorded: a run that raises (divergence, non-finite weights,
        a full disk at the final checkpoint, ...) leaves OUTPUT_DIR/failure.json naming the error and iteration --
        Detectron2 still runs the final evaluation in after_train, so evaluation.json alone does not mean finished."""
        logging.getLogger("detectron2").info(
            f"training {type(self._trainer.model).__name__} in {comm.get_world_size()} process(es) on "
            f"{self.cfg.MODEL.DEVICE} with {type(self._trainer).__name__}")
        failure = os.path.join(self.cfg.OUTPUT_DIR, FAILURE)
        try:
            result = super().train()
        except BaseException as err:
            if comm.is_main_process():
                atomic_write_text(failure, json.dumps({"error": f"{type(err).__name__}: {err}"[:2000],
                                                       "iteration": self.iter, "max_iter": self.max_iter}))
            raise
        if comm.is_main_process() and os.path.exists(failure):  # an earlier attempt failed; this one finished
            os.remove(failure)
        return result

    @classmethod
    def build_optimizer(cls, cfg, model):
        return build_optimizer(cfg, model)

    @classmethod
    def build_train_loader(cls, cfg):
        return build_train_loader(cfg)

    @classmethod
    def build_test_loader(cls, cfg, dataset_name):
        return build_test_loader(cfg, dataset_name)

    def run_step(self):
        try:
            super().run_step()
        except FloatingPointError as err:  # add where it happened and what is safe to resume from
            latest = {k: round(v[0], 4) for k, v in get_event_storage().latest().items() if k.startswith("loss")}
            last = self.checkpointer.get_checkpoint_file() or "none yet"
            raise FloatingPointError(f"training diverged at iteration {self.iter}: {err} Loss terms of the last "
                                     f"logged iteration: {latest}. The last good checkpoint is {last}.") from None

    # --- checkpoint contents: include the optimizer (and AMP scaler) state --------------------------------------
    # (Detectron2 main does the same in DefaultTrainer; written against TrainerBase so both versions load it once.)
    def state_dict(self):
        ret = TrainerBase.state_dict(self)
        ret["_trainer"] = self._trainer.state_dict()
        ret[CLASSES_KEY] = self.classes  # what the class ids mean: --resume and --eval-only check it
        return ret

    def load_state_dict(self, state_dict):
        check_checkpoint_classes(state_dict.get(CLASSES_KEY), self.cfg.DATASETS.TRAIN[0],
                                 self.checkpointer.get_checkpoint_file() or "the checkpoint", "Resuming it")
        TrainerBase.load_state_dict(self, state_dict)
        if "_trainer" in state_dict:
            self._trainer.load_state_dict(state_dict["_trainer"])

    # --- outputs: Detectron2's writers (metrics.json is its JSONWriter log, in standard JSON); evaluation.json --
    def build_writers(self):
        return run_writers(self.cfg.OUTPUT_DIR, self.max_iter)

    @classmethod
    def build_evaluator(cls, cfg, dataset_name, output_folder=None):
        output_folder = output_folder or os.path.join(cfg.OUTPUT_DIR, INFERENCE_DIR, dataset_name)
        return build_evaluator(cfg, dataset_name, output_folder, distributed=comm.get_world_size() > 1)

    @classmethod
    def test(cls, cfg, model, evaluators=None):
        """Evaluate on every DATASETS.TEST entry (with `evaluators[i]` for the i-th when given, else the dataset's
        own evaluator); rank 0 writes OUTPUT_DIR/evaluation.json."""
        if evaluators is not None and len(evaluators) != len(cfg.DATASETS.TEST):
            raise ValueError(f"{len(evaluators)} evaluators for {len(cfg.DATASETS.TEST)} DATASETS.TEST entries")
        results: OrderedDict = OrderedDict()
        timing, conventions, inference = {}, {}, {}
        evaluated = model
        if cfg.EVAL.FAST_INFERENCE:  # one optimized copy for every test set; `model` (training) is not changed
            evaluated = optimize_detector_for_inference(model.module if hasattr(model, "module") else model)
        for i, name in enumerate(cfg.DATASETS.TEST):
            loader = cls.build_test_loader(cfg, name)
            evaluator = evaluators[i] if evaluators is not None else cls.build_evaluator(cfg, name)
            t0 = time.perf_counter()
            with ForwardTimer(evaluated, excluded=lambda: compile_seconds(evaluated)) as forward:
                results[name] = inference_on_dataset(evaluated, loader, evaluator)
            timing[name] = round(time.perf_counter() - t0, 2)
            if comm.is_main_process() and results[name]:  # Detectron2's "copypaste:" lines, as DefaultTrainer.test
                logger.info(f"Evaluation results for {name} in csv format:")
                print_csv_format(results[name])
            conventions[name] = getattr(evaluator, "conventions", {})
            inference[name] = {"s_per_image": forward.per_call, "images_timed": max(0, forward.calls - forward.warmup),
                               "batch": 1, "fast_inference": bool(cfg.EVAL.FAST_INFERENCE),
                               # cumulative over the test sets (each new input shape may compile again); left
                               # out of s_per_image
                               "compile_seconds": round(compile_seconds(evaluated), 2)}
        if comm.is_main_process():
            completed = None
            try:  # during training; after the last step Detectron2's storage.iter == MAX_ITER ...
                # ... and MAX_ITER + 1 when a finished run is resumed again (e.g. a Slurm requeue after its end)
                completed = min(get_event_storage().iter, cfg.SOLVER.MAX_ITER)
            except AssertionError:  # evaluation outside training (--eval-only)
                pass
            net = model.module if hasattr(model, "module") else model
            train = {**peak_training_memory(cfg)} if completed is not None else {}
            write_evaluation(cfg.OUTPUT_DIR, {k: dict(v) for k, v in results.items()},
                          {"iterations_completed": completed, "eval_seconds": timing, "conventions": conventions,
                           "inference": inference, "train": train, "measured_on": measured_on(cfg),
                           "parameters": sum(p.numel() for p in net.parameters()),
                           "model": cfg.MODEL.BACKBONES.NAME, "weights": cfg.MODEL.WEIGHTS,
                           "datasets": {name: dataset_files(name) for name in cfg.DATASETS.TEST}})
        return results if len(results) > 1 else next(iter(results.values()), results)
