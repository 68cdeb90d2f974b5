"""`python -m vlajax.train smoke`: the foundation end to end, on a teacher-student regression.

Contributors: read AGENTS.md (workflow and JIT-safety rules) before writing a new entry point.

It exercises every shared piece the real trainers use, in their order: distributed start-up,
the persistent compile cache, the mesh, a train state built directly on its shards, a jitted
step with explicit shardings and donation, process-local batches made global, TensorBoard
scalars, progress, async Orbax checkpoints and exact resume. The student is a 2-layer MLP
with logically named axes; the teacher is a fixed random linear map, so the loss must fall.
Steps, learning rate and warmup come from the `sft` section; checkpoints and logs from theirs.
"""

from __future__ import annotations

import functools
import json
import logging
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.policies import run_files
from vlajax.shared import compile_cache
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.logging import MetricsLogger, Progress
from vlajax.training.train_state import TrainState

log = logging.getLogger(__name__)

IN_DIM, HIDDEN, OUT_DIM = 32, 64, 8


class Student(nn.Module):
    """x: float32 [B, IN_DIM] -> float32 [B, OUT_DIM]."""

    @nn.compact
    def __call__(self, x):
        dense = functools.partial(nn.DenseGeneral, use_bias=False)
        h = dense(HIDDEN, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "mlp")))(x)
        h = nn.with_logical_constraint(nn.gelu(h), ("act_batch", "act_mlp"))
        return dense(
            OUT_DIM, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("mlp", "embed"))
        )(h)


def make_batch(seed: int, step: int, batch_size: int) -> dict[str, np.ndarray]:
    """This process's slice of the global batch for `step` (deterministic in seed and step)."""
    n_proc, pid = jax.process_count(), jax.process_index()
    local = batch_size // n_proc
    rng = np.random.default_rng([seed, step, pid])
    teacher = np.random.default_rng([seed, 12345]).standard_normal((IN_DIM, OUT_DIM)).astype(np.float32) / 4
    x = rng.standard_normal((local, IN_DIM)).astype(np.float32)
    return {"x": x, "y": x @ teacher}


def loss_fn(params, batch):
    pred = Student().apply({"params": params}, batch["x"])
    return jnp.mean(jnp.square(pred - batch["y"]))


def train_step(state: TrainState, batch) -> tuple[TrainState, dict[str, jax.Array]]:
    """One AdamW update. state: TrainState; batch: {'x': [B, IN], 'y': [B, OUT]}."""
    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
    state = state.apply_gradients(grads)
    return state, {"loss": loss, "grad_norm": optax.global_norm(grads)}


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    s = cfg.sft
    schedule = optax.warmup_cosine_decay_schedule(
        0.0,
        s.learning_rate,
        max(s.warmup_steps, 1),
        max(s.num_steps, s.warmup_steps + 1),
        end_value=s.learning_rate * s.end_lr_fraction,
    )
    parts = [optax.clip_by_global_norm(s.grad_clip)] if s.grad_clip > 0 else []
    return optax.chain(*parts, optax.adamw(schedule, weight_decay=s.weight_decay))


def run(cfg: TrainConfig) -> int:
    # ---- Start-up: processes, compile cache, mesh (all before any compile) ----------------
    distributed.initialize(cfg.distributed)
    compile_cache.enable(cfg.compilation_cache_dir)
    mesh = sharding.make_mesh(cfg.mesh)
    rules = cfg.mesh.logical_rules
    dp = mesh.shape[sharding.DP]
    if cfg.data.batch_size % dp:
        raise ConfigError(f"data.batch_size={cfg.data.batch_size} is not divisible by the mesh's dp={dp}")
    log.info("mesh %s over %d processes", dict(mesh.shape), jax.process_count())

    # ---- Train state, built on its shards -------------------------------------------------
    tx = make_optimizer(cfg)

    def init(rng):
        params = Student().init(rng, jnp.zeros((1, IN_DIM)))["params"]
        return TrainState.create(params, tx, rng)

    state, state_shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(cfg.seed))
    batch_sharding = sharding.data_sharding(mesh)
    step_fn = jax.jit(
        train_step,
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=(state_shardings, sharding.replicated(mesh)),
        donate_argnums=(0,),
    )

    # ---- Checkpoints and resume -----------------------------------------------------------
    _, ckpt = run_files.run_checkpointer(cfg)
    start = 0
    if cfg.checkpoint.resume and ckpt.latest_step() is not None:
        state, extra = ckpt.restore(checkpoint.abstract_state(state))
        start = int(extra["step"])
        log.info("resumed from step %d", start)

    # ---- Train ----------------------------------------------------------------------------
    logger = MetricsLogger(os.path.join(cfg.output_dir, "tb"), enabled=cfg.logging.tensorboard)
    first = last = None
    with (
        sharding.use_mesh(mesh, rules),
        Progress(cfg.sft.num_steps, "smoke", cfg.logging.progress, cfg.logging.every_steps, start) as progress,
    ):
        for step in range(start, cfg.sft.num_steps):
            batch = distributed.to_global(make_batch(cfg.seed, step, cfg.data.batch_size), batch_sharding)
            state, metrics = step_fn(state, batch)
            if (step + 1) % cfg.logging.every_steps == 0 or step + 1 == cfg.sft.num_steps:
                host = logger.scalars(step + 1, metrics, prefix="train/")
                last = host["train/loss"]
                first = last if first is None else first
                progress.update(step + 1, {"loss": last})
            final = step + 1 == cfg.sft.num_steps
            ckpt.save(step + 1, state, extra={"step": step + 1, "config": cfg.name}, force=final)
    ckpt.close()
    logger.close()

    # ---- Report ---------------------------------------------------------------------------
    summary = {
        "start_step": start,
        "steps": cfg.sft.num_steps,
        "first_logged_loss": first,
        "final_loss": last,
        "devices": jax.device_count(),
        "processes": jax.process_count(),
    }
    if distributed.is_main_process():
        print(json.dumps(summary), flush=True)
    distributed.shutdown()
    return 0
