"""`python -m vlajax.train sft --preset NAME`: supervised fine-tuning on demonstrations.

The loop follows `vlajax.sft.smoke` piece by piece: distributed start-up, compile cache, mesh, a
train state built on its shards, one jitted step with explicit shardings and state donation,
global batches from the grain loader (`vlajax.data.make_loader`), TensorBoard scalars,
progress, async Orbax checkpoints (params, optimizer state, step, RNG, EMA and the loader's
iterator state) and exact resume: re-running the same command continues from the newest
checkpoint in `checkpoint.dir` (default `<output_dir>/checkpoints`). SIGTERM / Ctrl-C (`vlajax.training.preemption`;
docs/reliability.md): set-up, compiles, a restore, an evaluation (its step is saved before it starts)
and a step whose predecessor is saved are abandoned at once (exit 0 after the write in flight); a
step with unsaved predecessors is finished and saved, then the run leaves. A second signal exits at once.

The step consumes every batching mode through one path (`data.batching`):

    emb   = embed_prefix(obs)                           per-sample prefix [N, L, W]
    rows  = gather_prefix(emb, prefix_index, seg, groups)   fixed: identity; packed: rows [R, T, W]
    cache = encode_prefix(rows, seg, pos)              attention only within a segment
    per-sample cache = rows_to_samples(cache, ...)     each sample sees only its own tokens
    loss  = flow matching (velocity) or token CE on the sample's action chunk

so the packed forward pass is the padded one per sample (tests/data/test_packing.py,
tests/sft/test_sft.py). Optimizer: AdamW, linear warmup then cosine decay to
`end_lr_fraction`, global-norm clipping, optional EMA of the parameters (`sft.ema_decay`;
evaluation then uses the EMA). Closed-loop evaluation (`vlajax.evaluation.closed_loop.evaluate`) runs every
`sft.eval_every` steps and at the end (`-1` = never).

Next to the checkpoints the run writes `config.json` (the `TrainConfig`) and `policy.json`
(the `vlajax.policies.bridge.Bridge`: cameras and normalization statistics, `"source": "sft"`), which is all
`python -m vlajax.train eval --checkpoint DIR` needs besides the checkpoint. From a policy trained
on delta actions (`sft.init_from` an imported `pi0_libero`: `init_from.delta_transforms`) the
targets are openpi's DeltaActions and `policy.json` keeps its openpi transforms (AbsoluteActions
on the way out).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vlajax.config.run import checkpoint_steps
from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.data import build as data_build
from vlajax.data import demos
from vlajax.data.lerobot import DatasetError
from vlajax.evaluation import closed_loop
from vlajax.models import build_model, fp8
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.policies.run_files import (
    checkpoint_dir,
    eval_params,
    inference_model,
    init_fn,
    make_schedule,
    write_policy,
)
from vlajax.sft import init_from
from vlajax.sft import loss as sft_loss
from vlajax.training import distributed, sharding
from vlajax.training.run import Run
from vlajax.training.train_state import TrainState, step_rng

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# The step
# ------------------------------------------------------------------------------------------


# the loss SFT trains with, one module (`vlajax.sft_loss`); tests and experiments import these names from here too
batch_observation, sample_cache, aux_target_loss, loss_fn = (
    sft_loss.batch_observation, sft_loss.sample_cache, sft_loss.aux_target_loss, sft_loss.loss_fn)


def train_step(model: VLA, groups: int, ema_decay: float, state: TrainState, batch: dict, aux_weight: float = 1.0,
               target_noise: float = 0.0):
    """One AdamW update on one global batch. -> (state, metrics)."""
    rng = step_rng(state)
    if state.collections:
        (loss, metrics), (grads, cols) = jax.value_and_grad(loss_fn, argnums=(0, 5), has_aux=True)(
            state.params, model, batch, rng, groups, state.collections, aux_weight, target_noise)
    else:
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, model, batch, rng, groups,
                                                                          None, aux_weight, target_noise)
        cols = None
    state = state.apply_gradients(grads, ema_decay, collections=cols)
    seg = batch["segment_ids"]
    live = batch["sample_mask"]
    metrics = {
        **metrics, "loss": loss, "grad_norm": optax.tree.norm(grads),
        "samples": jnp.sum(live), "prefix_tokens": jnp.sum(seg > 0),
        "row_tokens": jnp.asarray(seg.size, jnp.int32),
        "action_tokens": jnp.sum(batch["action_mask"] & live[:, None]),
    }
    return state, metrics


def make_train_step(model: VLA, groups: int, ema_decay: float, state_shardings, mesh, aux_weight: float = 1.0,
                    target_noise: float = 0.0):
    """`train_step` jitted once with explicit shardings and the state donated."""
    return jax.jit(
        lambda state, batch: train_step(model, groups, ema_decay, state, batch, aux_weight, target_noise),
        in_shardings=(state_shardings, sharding.data_sharding(mesh)),
        out_shardings=(state_shardings, sharding.replicated(mesh)),
        donate_argnums=(0,),
    )


# ------------------------------------------------------------------------------------------
# The command
# ------------------------------------------------------------------------------------------


def _check(cfg: TrainConfig, mesh) -> None:
    dp = mesh.shape[sharding.DP]
    if cfg.data.batch_size % dp:
        raise ConfigError(f"data.batch_size={cfg.data.batch_size} is not divisible by the mesh's dp={dp}")
    if cfg.sft.aux_target_weight != 1.0 and cfg.model.aux_target == "none":
        raise ConfigError(f"sft.aux_target_weight={cfg.sft.aux_target_weight} needs model.aux_target "
                          "(e.g. 'grasp_place'); without it there is no auxiliary loss to weight")
    if cfg.sft.aux_start_weight != 1.0 and cfg.model.aux_target != "grasp_place":
        raise ConfigError(f"sft.aux_start_weight={cfg.sft.aux_start_weight} needs model.aux_target='grasp_place' "
                          f"(got {cfg.model.aux_target!r}): it weighs the start frames against the others")
    if cfg.sft.target_noise > 0 and not cfg.model.target_conditioning:
        raise ConfigError(f"sft.target_noise={cfg.sft.target_noise} needs model.target_conditioning "
                          "(it is the noise on the teacher-forced target)")
    if cfg.data.grounding_fraction > 0:
        demos.check_grounding(cfg)
    if cfg.sft.eval_every > 0 and cfg.env.obs_mode != "pixels":
        raise ConfigError("sft.eval_every needs env.obs_mode='pixels' (the VLA reads cameras)")


def train(cfg: TrainConfig, *, stop_at: int | None = None, return_state: bool = False) -> dict[str, Any]:
    """Run SFT to `sft.num_steps` (resuming when a checkpoint exists). -> summary dict.

    `stop_at`: leave after that step (with a checkpoint), as if interrupted; the schedule is
    still the one of `sft.num_steps`. `return_state`: put the final `TrainState` in the summary.
    """
    total = cfg.sft.num_steps
    with Run(cfg, "sft", unit="step", total=total) as run, contextlib.ExitStack() as te_scope:
        with run.setting_up():  # nothing new yet: a signal abandons at once
            # ---- Start-up: processes, console, compile cache, mesh ------------------------------
            run.start(progress=f"sft {cfg.name}", mesh=False)
            # sft.init_from: an empty model.tokenizer_path takes the source's
            run.cfg = cfg = init_from.resolve_config(cfg)
            mesh = run.make_mesh()
            _check(cfg, mesh)
            # the source learned delta actions: so do we (and keep them); resuming, the run's own record
            own = checkpoint_dir(cfg)
            resuming = cfg.checkpoint.resume and bool(checkpoint_steps(own))
            # 'off' (another embodiment): the dataset's actions and our own bridge; the source's transforms
            # are not read, so none of their refusals (a mask too wide, openpi's ALOHA space) applies
            openpi = None if cfg.sft.delta_actions == "off" else init_from.openpi_transforms(
                cfg, own if resuming else None)

            # ---- Data first: bad data fails before anything compiles ------------------------------
            frames = None
            if cfg.data.grounding_fraction > 0:  # rendered first frames that train only the aux head
                frames = functools.partial(demos.grounding_frames, cfg)
            with run.phase("loading the dataset"):
                loader, info = data_build.make_loader(cfg, mesh, aux_frames=frames,
                                           delta_mask=openpi.delta_mask if openpi else (),
                                           delta_from=f"sft.init_from={cfg.sft.init_from}",
                                           openpi_stats=openpi is not None)
            bridge = Bridge.from_data(cfg, info)
            if openpi is not None and any(openpi.delta_mask):  # serving / eval: its outputs back to absolute
                bridge = dataclasses.replace(bridge, openpi=openpi)
                log.info("sft: %s has openpi's transforms (%s): norm stats as its compute_norm_stats, "
                         "DeltaActions on mask %s", cfg.sft.init_from, openpi.train_config or "custom",
                         [int(b) for b in openpi.delta_mask])
            # (logged after the data opened: a dataset error stays the command's only line)
            log.info("sft: mesh %s over %d processes", dict(mesh.shape), jax.process_count())
            log.info("sft: %s, cameras %s, %s batching: %d slots in %d x %d rows", info.root, info.cameras,
                     cfg.data.batching, info.slots, info.rows, info.row_len)

            # ---- Train state on its shards, one jitted step ---------------------------------------
            model = build_model(cfg.model)  # our VLA or openpi's pi0 / pi0.5
            if cfg.model.fp8 == "te":  # model.fp8='te': init and every step trace inside TE's autocast
                te_scope.enter_context(fp8.autocast("te", fp8.mesh_resource(mesh)))
            state, state_shardings = run.init_state(init_fn(cfg, info.cameras))
            n_params = sum(x.size for x in jax.tree.leaves(state.params))
            step_fn = make_train_step(model, info.groups, cfg.sft.ema_decay, state_shardings, mesh,
                                      cfg.sft.aux_target_weight, cfg.sft.target_noise)

            # ---- Checkpoints, config and policy files, resume -------------------------------------
            ckpt_dir, _ = run.open_checkpoints()
            if distributed.is_main_process():
                write_policy(ckpt_dir, cfg, bridge, "sft")
            state, extra = run.restore(state, data_iter=loader)
            start = 0
            if extra is not None:
                start = run.resumed_at(int(extra["step"]))
                log.info("sft: resumed from step %d", start)
            elif cfg.sft.init_from:  # a fresh run starts from another run's (or an imported checkpoint's) weights
                state = init_from.load_into(cfg, state, mesh)

        # ---- Train ----------------------------------------------------------------------------
        logger = run.open_logger()
        schedule = make_schedule(cfg)
        losses: list[float] = []
        evals: list[dict] = []
        totals = {"prefix_tokens": 0, "row_tokens": 0, "samples": 0}
        t_start = time.perf_counter()
        t_last, last_logged = t_start, start
        limit = cfg.sft.time_limit_minutes
        run.progress.resume(start)
        steps = run.steps(start, total if stop_at is None else min(stop_at, total))
        with sharding.use_mesh(mesh, run.rules):
            for step in steps:
                with steps.region(step):  # nothing since the saved state would be lost: a signal abandons it
                    first = step == start  # its phases on the console: the first batch, then the compile
                    with run.phase("waiting for the first batch", False) if first else contextlib.nullcontext():
                        batch = next(loader)
                    with run.phase("compiling the train step") if first else contextlib.nullcontext():
                        state, metrics = step_fn(state, batch)
                        host = {k: float(v) for k, v in jax.device_get(metrics).items()}
                losses.append(host["loss"])
                for k in totals:
                    totals[k] += host[k]
                done = step + 1
                if not np.isfinite(host["loss"]):
                    raise FloatingPointError(f"sft: non-finite loss {host['loss']} at step {done}")
                if done % cfg.logging.every_steps == 0 or done == total:
                    now = time.perf_counter()
                    host["lr"] = float(schedule(step))
                    host["steps_per_s"] = (done - last_logged) / max(now - t_last, 1e-9)
                    host["padding_fraction"] = 1.0 - host["prefix_tokens"] / max(host["row_tokens"], 1)
                    t_last, last_logged = now, done
                    logger.scalars(done, host, prefix="train/")
                    run.progress.update(done, {"loss": host["loss"], "lr": host["lr"]})
                if limit > 0 and done < steps.end and time.perf_counter() - t_start > 60 * limit:
                    log.warning("sft: time limit of %.1f min reached at step %d; stopping", limit, done)
                    steps.finish_at(done)
                periodic = cfg.sft.eval_every > 0 and done % cfg.sft.eval_every == 0
                evaluate = periodic or (done == steps.end and cfg.sft.eval_every >= 0)
                if steps.boundary(done, state, {"step": done, "config": cfg.name, "loss": host["loss"]}, evaluate,
                                  data_iter=loader):
                    with run.evaluating(done):
                        evals.append(_evaluate(cfg, bridge, inference_model(model), eval_params(state), done, logger))
        run.close()
        loader.close()
    seconds = time.perf_counter() - t_start
    summary = {
        "status": steps.status, "start_step": start, "steps": int(jax.device_get(state.step)), "num_steps": total,
        "params": int(n_params),
        "first_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "losses": losses, "seconds": round(seconds, 1),
        "padding_fraction": 1.0 - totals["prefix_tokens"] / max(totals["row_tokens"], 1),
        "checkpoint_dir": ckpt_dir, "evals": evals,
    }
    if return_state:
        summary["state"] = state
    return summary


def _evaluate(cfg, bridge, model, params, step, logger) -> dict:
    out_dir = os.path.join(cfg.output_dir, "eval", f"step-{step}")
    result = closed_loop.evaluate(cfg, bridge, model, params, episodes_per_task=cfg.sft.eval_episodes_per_task,
                      out_dir=out_dir, gifs=cfg.logging.video_every > 0)
    logger.scalars(step, {"mean_success": result["mean_success"],
                          **{f"success/{k}": v for k, v in result["per_task"].items()}}, prefix="eval/")
    log.info("sft: step %d eval mean success %.3f %s", step, result["mean_success"], result["per_task"])
    return {"step": step, "mean_success": result["mean_success"], "per_task": result["per_task"]}


def run(cfg: TrainConfig) -> int:
    try:
        summary = train(cfg)
    except (DatasetError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    if distributed.is_main_process():
        short = {k: v for k, v in summary.items() if k != "losses"}
        print(json.dumps(short), flush=True)
    distributed.shutdown()
    return 0
