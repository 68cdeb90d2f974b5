"""Typed, frozen configuration for every part of vlajax, and the preset registry.

A run is one `TrainConfig`. Each section is a frozen dataclass with one comment per field
(tyro turns those comments into `--help` text). Presets are named `TrainConfig`s kept in a
registry; `get_config(name)` suggests the closest names on a typo. Everything that can be
checked without devices is checked in `__post_init__`; checks that need the device count
live in `vlajax.training.sharding.resolve_mesh_shape` and run before anything compiles.

The logical-to-mesh sharding tables are data (`LOGICAL_RULES`), selected by name in
`MeshConfig.rules` and amended entry by entry with `MeshConfig.rule_overrides`.

Layout: `vlajax.config.errors` (ConfigError and the check helper), `vlajax.config.mesh` (mesh axes,
rule tables, MeshConfig), `vlajax.config.model` (ModelConfig, openpi tower sizes) and `vlajax.config.run`
(checkpoint, logging, distributed start-up) hold their sections; this module holds the others, `TrainConfig`
and the registry, and re-exports them all; the base presets `debug` and `cpu-small` live in
`vlajax.config.presets.base`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Literal

from vlajax.config.errors import ConfigError, parse_errors
from vlajax.config.errors import check as _check
from vlajax.config.mesh import DP, LOGICAL_RULES, MESH_AXES, SP, TP, MeshConfig
from vlajax.config.model import GEMMA_VARIANTS, SIGLIP_VARIANTS, ModelConfig
from vlajax.config.run import CheckpointConfig, DistributedConfig, LoggingConfig

__all__ = [  # the names other modules import from here (the sections live in their own modules)
    "DP", "GEMMA_VARIANTS", "LOGICAL_RULES", "MESH_AXES", "SIGLIP_VARIANTS", "SP", "TP", "AsyncConfig",
    "CheckpointConfig", "ConfigError", "DataConfig", "DistributedConfig", "EnvConfig", "LiberoConfig", "LoggingConfig",
    "MeshConfig", "ModelConfig", "RLConfig", "SFTConfig", "TrainConfig", "action_norm", "get_config",
    "parse_errors", "preset_descriptions", "preset_names", "register",
]

# ----------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Simulation: the task suite, batch of envs, cameras and control."""

    suite: str = "spatial"  # task suite: 'spatial' | 'object' | 'goal', or a LIBERO suite 'libero_*' (docs/libero.md)
    task: str = ""  # one task, e.g. 'goal/stack' (vlajax.envs.registry.ALL_ENVS), or '' for the whole suite
    num_envs: int = 16  # parallel envs per process
    obs_mode: Literal["pixels", "state"] = "pixels"  # pixels: cameras + state; state: state only
    image_size: int = 32  # rendered image side in pixels (the env's own default is 64)
    cameras: tuple[str, ...] = ("agentview", "wrist")  # cameras rendered for the policy (subset of these two)
    render_backend: Literal["jax", "warp"] = "jax"  # pure-JAX ray caster (CPU default) or MJX-Warp
    # simulator: MJX 'jax' or 'warp', 'c' = C MuJoCo on the host, 'auto' = C for one-device CPU RL rollouts, else MJX
    physics_impl: Literal["jax", "warp", "c", "auto"] = "auto"
    episode_length: int = 200  # low-level control steps before truncation
    action_repeat: int = 1  # multiplies the env's 5 physics steps (4 ms each) per control step
    # domain randomization for demos and RL: 'axis=lo:hi,...' (e.g. 'camera=0:2'); each episode draws its levels ('' =
    # off)
    randomize: str = ""
    # robustness evaluation axes and levels ('all', 'camera,lighting', 'camera=1:3'; docs/robustness.md; '' = off)
    robustness: str = ""

    def __post_init__(self):
        _check(self.num_envs >= 1, f"env.num_envs must be >= 1, got {self.num_envs}")
        _check(self.image_size >= 8, f"env.image_size must be >= 8, got {self.image_size}")
        _check(self.episode_length >= 1, "env.episode_length must be >= 1")
        _check(self.action_repeat >= 1, f"env.action_repeat must be >= 1, got {self.action_repeat}")
        _check(
            self.suite in ("spatial", "object", "goal") or self.suite.startswith("libero_"),
            f"env.suite must be one of spatial, object, goal (or a LIBERO suite libero_*); got {self.suite!r}",
        )
        _check(
            bool(self.cameras) and set(self.cameras) <= {"agentview", "wrist"},
            f"env.cameras must be a non-empty subset of ('agentview', 'wrist'), got {self.cameras}",
        )
        _check(
            not (self.render_backend == "warp" and self.physics_impl != "warp"),
            "env.render_backend='warp' needs env.physics_impl='warp' (MJX renders only Warp data)",
        )
        if self.randomize or self.robustness:
            # lazy: the env package imports JAX; `vlajax.train --help` and config parsing stay JAX-free
            from vlajax.envs import perturb

            for field, parse in (("randomize", perturb.parse_ranges), ("robustness", perturb.parse_eval)):
                try:
                    axes = parse(getattr(self, field)) if getattr(self, field) else {}
                except ValueError as e:
                    _check(False, f"env.{field}: {e}")
                _check("dynamics" not in axes or self.physics_impl in ("jax", "auto"),
                       f"env.{field}: the dynamics axis needs env.physics_impl='jax' (per-env MJX model fields)")


def action_norm(cfg: TrainConfig) -> str:
    """The action normalization mode `cfg.data.action_norm` selects ('auto' resolved by head)."""
    if cfg.data.action_norm != "auto":
        return cfg.data.action_norm
    return "min_max" if cfg.model.action_head == "tokens" else "quantile"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Demonstration data and the input pipeline."""

    dataset_dir: str = ""  # LeRobot v3.0 dataset root ('' = <output_dir>/demos)
    batch_size: int = 32  # global batch (all processes); divides mesh.dp
    batching: Literal["fixed", "dynamic", "packed"] = "packed"  # padding strategy for variable-length prefixes
    shuffle_seed: int = 0  # seed of the global, index-based shuffle
    num_threads: int = 2  # grain read threads per process
    prefetch: int = 4  # batches prefetched per process
    drop_cameras: tuple[str, ...] = ()  # cameras removed from the input (their tokens disappear)
    augment: bool = False  # random crop + colour jitter on training images
    pack_rows: int = 0  # packed: prefix rows per global batch (0 = sized by a first-fit of the data's prefix lengths)
    pack_row_len: int = 0  # packed: tokens per row (0 = 2 x model.prefix_len)
    max_segments_per_row: int = 0  # packed: samples per row at most (0 = no limit)
    # action normalization: quantile (q01/q99), z-score or min/max; 'auto' = quantile for flow, min_max for tokens
    action_norm: Literal["auto", "quantile", "mean_std", "min_max"] = "auto"
    state_norm: Literal["quantile", "mean_std"] = "mean_std"  # proprioceptive state normalization
    camera_dropout: float = 0.0  # training: drop each camera but the first (sorted) from this fraction of samples
    episodes_per_task: int = 50  # demos: successful expert episodes written per task
    # demos: per-step probability of a short random move replacing the expert's action (labels stay the expert's)
    demo_perturb_prob: float = 0.0
    demo_perturb_steps: int = 6  # demos: longest perturbation (control steps); lengths are uniform in 1..this
    demo_target_swap: bool = False  # demos, object suite: run every scene three times, each cube once the named target
    video: bool = False  # demos: store cameras as AV1 video instead of PNG image features
    demo_workers: int = 2  # demos on a LIBERO suite (vlajax.libero.demos): LIBERO worker processes
    demo_image_size: int = 256  # demos on a LIBERO suite: both cameras' render size (openpi's LIBERO data: 256)
    demo_max_steps: int = 0  # demos on a LIBERO suite: step limit after the 10-step wait (0 = the suite's)
    demo_keep_failures: bool = False  # demos on a LIBERO suite: write the expert's failed episodes too
    # SFT, object suite, with model.aux_target: fraction of samples that are first frames training only the aux head
    grounding_fraction: float = 0.0
    grounding_scenes: int = 1000  # data.grounding_fraction: scenes rendered for it when SFT starts (3 frames each)
    # pi families: 'camera=slot' entries mapping our cameras to openpi's image slots (an empty slot is masked)
    camera_map: tuple[str, ...] = ("agentview=base_0_rgb", "wrist=left_wrist_0_rgb")

    def __post_init__(self):
        _check(self.batch_size >= 1, f"data.batch_size must be >= 1, got {self.batch_size}")
        _check(self.num_threads >= 0 and self.prefetch >= 0, "data.num_threads and data.prefetch must be >= 0")
        _check(self.episodes_per_task >= 1, f"data.episodes_per_task must be >= 1, got {self.episodes_per_task}")
        _check(0.0 <= self.demo_perturb_prob < 1.0 and self.demo_perturb_steps >= 1,
               "data.demo_perturb_prob must be in [0, 1) and data.demo_perturb_steps >= 1")
        _check(min(self.pack_rows, self.pack_row_len, self.max_segments_per_row) >= 0,
               "data.pack_rows, data.pack_row_len and data.max_segments_per_row must be >= 0 (0 = automatic)")
        _check(0.0 <= self.camera_dropout < 1.0, f"data.camera_dropout must be in [0, 1), got {self.camera_dropout}")
        _check(0.0 <= self.grounding_fraction < 1.0,
               f"data.grounding_fraction must be in [0, 1), got {self.grounding_fraction}")
        _check(self.grounding_scenes >= 1, f"data.grounding_scenes must be >= 1, got {self.grounding_scenes}")
        _check(self.grounding_fraction > 0 or self.grounding_scenes == 1000,
               f"data.grounding_scenes={self.grounding_scenes} needs data.grounding_fraction > 0 (it sizes that mix)")


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning on demonstrations."""

    num_steps: int = 1000  # optimizer updates
    learning_rate: float = 3e-4  # peak learning rate
    warmup_steps: int = 100  # linear warmup, then cosine decay to end_lr_fraction * peak
    end_lr_fraction: float = 0.1  # final learning rate as a fraction of the peak
    weight_decay: float = 1e-4  # AdamW decoupled weight decay
    grad_clip: float = 1.0  # global-norm gradient clipping (0 = off)
    ema_decay: float = 0.0  # exponential moving average of params (0 = off)
    eval_every: int = 0  # closed-loop eval every N steps (0 = only at the end, -1 = never)
    eval_episodes_per_task: int = 10  # episodes per task in periodic eval (and the eval command's default)
    eval_replan_steps: int = 0  # closed-loop eval: actions executed per predicted chunk (0 = the whole chunk)
    eval_policy_server: str = ""  # eval command: ws://HOST:PORT of a policy server to evaluate ('' = --checkpoint)
    eval_connections: int = 16  # eval --policy-server: connections (requests in flight; the server batches them)
    time_limit_minutes: float = 0.0  # stop (with a checkpoint) once training ran this long (0 = no limit)
    # checkpoint directory whose weights start the run (an SFT run or an imported openpi policy; '' = fresh)
    init_from: str = ""
    # init_from a delta-action policy: 'auto' = train on its DeltaActions; 'off' = the dataset's actions as they are
    delta_actions: Literal["auto", "off"] = "auto"
    # weight of the auxiliary target loss (MSE of `model.aux_target`); only with model.aux_target set
    aux_target_weight: float = 1.0
    # with model.aux_target: weight of the aux loss on an episode's start frames (others weigh 1)
    aux_start_weight: float = 1.0
    # with model.target_conditioning: std of the noise added to the teacher-forced target (0 = exact)
    target_noise: float = 0.0

    def __post_init__(self):
        _check(self.target_noise >= 0, f"sft.target_noise must be >= 0, got {self.target_noise}")
        _check(self.num_steps >= 0, "sft.num_steps must be >= 0")
        _check(self.time_limit_minutes >= 0,
               f"sft.time_limit_minutes must be >= 0 (0 = no limit), got {self.time_limit_minutes}")
        _check(self.aux_target_weight >= 0, f"sft.aux_target_weight must be >= 0, got {self.aux_target_weight}")
        _check(self.aux_start_weight >= 1, f"sft.aux_start_weight must be >= 1, got {self.aux_start_weight}")
        _check(self.learning_rate > 0, "sft.learning_rate must be > 0")
        _check(0.0 <= self.ema_decay < 1.0, "sft.ema_decay must be in [0, 1)")
        _check(self.eval_every >= -1, "sft.eval_every must be >= -1 (0 = only at the end, -1 = never)")
        _check(self.eval_episodes_per_task >= 1, "sft.eval_episodes_per_task must be >= 1")
        _check(self.eval_connections >= 1, "sft.eval_connections must be >= 1")
        _check(not self.eval_policy_server or self.eval_policy_server.startswith(("ws://", "wss://")),
               f"sft.eval_policy_server={self.eval_policy_server!r} must be ws://HOST:PORT")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """PPO / GRPO over action chunks (one decision = one chunk)."""

    algo: Literal["ppo", "grpo"] = "ppo"  # policy-gradient algorithm
    advantage: Literal["auto", "gae", "grpo", "rloo"] = "auto"  # estimator; auto: ppo->gae, grpo->grpo
    num_iterations: int = 100  # collect -> update iterations
    rollout_length: int = 16  # chunk decisions collected per env per iteration
    group_size: int = 8  # GRPO: rollouts per initial state (divides env.num_envs)
    # GRPO: 'balanced' deals the suite's tasks to the groups in turn; 'random' draws each group's task
    group_tasks: Literal["balanced", "random"] = "balanced"
    gamma: float = 0.99  # discount per chunk decision
    gae_lambda: float = 0.95  # GAE lambda
    clip_low: float = 0.2  # PPO ratio clip below 1
    clip_high: float = 0.28  # PPO ratio clip above 1 (clip-higher when > clip_low)
    dual_clip: float = 3.0  # dual-clip bound c for negative advantages (0 = off)
    value_coef: float = 0.5  # value-loss weight (PPO)
    value_clip: float = 0.0  # clip the value around the old value (0 = off)
    entropy_coef: float = 0.0  # entropy bonus weight
    kl_coef: float = 0.0  # weight of the KL penalty to the frozen initial policy (0 = off)
    behaviour_weight_cap: float = 2.0  # decoupled PPO: cap on pi_prox / pi_behaviour
    # above the cap: 'truncate' to the cap (verl's truncated IS, which keeps the sample's gradient) or 'drop' the
    # sample (AReaL)
    behaviour_weight_mode: Literal["drop", "truncate"] = "truncate"
    # importance ratios: 'decision' = one per chunk; 'factor' = one per token / flow entry (token-level PPO)
    ratio_level: Literal["decision", "factor"] = "decision"
    filter_zero_advantage: bool = True  # GRPO: drop groups whose rewards have zero variance
    advantage_eps: float = 1e-6  # GRPO: added to the group std before dividing
    group_std_normalize: bool = True  # GRPO: divide by the group std (False = Dr. GRPO, mean only)
    normalize_advantages: Literal["none", "batch", "minibatch"] = "minibatch"  # standardize over valid decisions
    # weight on negative advantages in the policy loss: 1 = plain policy gradient, 0 = positive samples only
    negative_advantage_weight: float = 1.0
    # token head: sampling temperature of the rollouts (evaluation stays greedy); other heads need 1
    temperature: float = 1.0
    target_kl: float = 0.0  # skip the remaining minibatch updates once the approximate KL exceeds this (0 = off)
    update_epochs: int = 2  # passes over each collected batch
    num_minibatches: int = 4  # minibatches per epoch (one optimizer update each)
    micro_batches: int = 1  # gradient-accumulation steps per minibatch
    learning_rate: float = 1e-4  # optimizer learning rate
    lr_warmup_steps: int = 0  # linear warmup of every learning rate over this many optimizer steps (0 = off)
    value_learning_rate: float = 0.0  # learning rate of the critic's own params (0 = rl.learning_rate)
    # PPO's critic: 'head' = the policy's value head; 'privileged' = an MLP on the simulator's state
    critic: Literal["head", "privileged"] = "head"
    critic_width: int = 256  # rl.critic='privileged': hidden width of its 2-layer MLP
    critic_warmup_iterations: int = 0  # first N iterations train only the critic (policy advantages zeroed)
    grad_clip: float = 1.0  # global-norm gradient clipping (0 = off)
    eval_every: int = 10  # closed-loop eval every N iterations (0 = only at the end, -1 = never)
    eval_episodes_per_task: int = 20  # episodes per task in each RL evaluation
    eval_seed: int = -1  # RNG seed of the evaluation episodes (-1 = the run's seed)
    init_from: str = ""  # SFT checkpoint directory to start from ('' = fresh weights)
    chunk_steps: int = 0  # actions of each predicted chunk executed per decision (0 = the whole chunk)
    # 'shaped' = shaped terms + success bonus; 'success' = bonus only; 'progress' = bonus + change of the shaped terms
    reward: Literal["shaped", "success", "progress"] = "shaped"

    def __post_init__(self):
        _check(0.0 < self.gamma <= 1.0, "rl.gamma must be in (0, 1]")
        _check(0.0 <= self.gae_lambda <= 1.0, "rl.gae_lambda must be in [0, 1]")
        _check(self.clip_low > 0 and self.clip_high > 0, "rl.clip_low and rl.clip_high must be > 0")
        _check(self.dual_clip == 0 or self.dual_clip > 1, "rl.dual_clip must be 0 (off) or > 1")
        _check(self.group_size >= 1 and self.num_minibatches >= 1 and self.micro_batches >= 1,
               "rl.group_size, rl.num_minibatches and rl.micro_batches must be >= 1")
        _check(self.clip_low < 1.0, f"rl.clip_low must be < 1 (ratio floor 1 - clip_low), got {self.clip_low}")
        _check(self.rollout_length >= 1 and self.update_epochs >= 1, "rl.rollout_length/update_epochs must be >= 1")
        _check(self.value_clip >= 0 and self.entropy_coef >= 0 and self.kl_coef >= 0 and self.value_coef >= 0,
               "rl.value_clip, rl.value_coef, rl.entropy_coef and rl.kl_coef must be >= 0")
        _check(self.behaviour_weight_cap >= 1.0, f"rl.behaviour_weight_cap must be >= 1: {self.behaviour_weight_cap}")
        _check(self.advantage_eps > 0, "rl.advantage_eps must be > 0")
        _check(0.0 <= self.negative_advantage_weight <= 1.0,
               f"rl.negative_advantage_weight must be in [0, 1] (1 = off), got {self.negative_advantage_weight}")
        _check(self.temperature > 0,
               f"rl.temperature must be > 0 (greedy evaluation needs no flag), got {self.temperature}")
        _check(self.critic_width >= 1, "rl.critic_width must be >= 1")
        _check(self.eval_seed >= -1, "rl.eval_seed must be >= 0, or -1 for the run's seed")
        _check(self.target_kl >= 0, "rl.target_kl must be >= 0 (0 = off)")
        _check(self.learning_rate > 0 and self.grad_clip >= 0, "rl.learning_rate must be > 0 and rl.grad_clip >= 0")
        _check(self.lr_warmup_steps >= 0, f"rl.lr_warmup_steps must be >= 0 (0 = off), got {self.lr_warmup_steps}")
        _check(self.value_learning_rate >= 0 and self.critic_warmup_iterations >= 0,
               "rl.value_learning_rate and rl.critic_warmup_iterations must be >= 0")
        _check(not (self.advantage == "rloo" and self.group_size < 2), "rl.advantage='rloo' needs rl.group_size >= 2")
        _check(not (self.algo == "grpo" and self.advantage == "gae"),
               "rl.advantage='gae' bootstraps from a critic; rl.algo='grpo' trains none (its episodes end in the "
               "rollout): use rl.advantage='grpo', 'rloo' or 'auto', or rl.algo='ppo'")
        _check(not (self.algo == "ppo" and self.advantage in ("grpo", "rloo")),
               f"rl.advantage={self.advantage!r} compares rollouts of one group (one initial state): it needs "
               "rl.algo='grpo'; PPO's envs reset independently, use rl.advantage='gae' (or 'auto')")
        _check(self.eval_every >= -1 and self.eval_episodes_per_task >= 1 and self.chunk_steps >= 0,
               "rl.eval_every must be >= -1 (0 = only at the end, -1 = never), rl.chunk_steps >= 0 and "
               "rl.eval_episodes_per_task >= 1")


@dataclasses.dataclass(frozen=True)
class AsyncConfig:
    """The asynchronous pipeline (verl fully-async + RL-VLA3 knobs)."""

    enabled: bool = False  # False = the synchronous collect -> update loop
    placement: Literal["colocated", "disaggregated", "hybrid"] = "colocated"  # device groups per role
    placement_ratio: str = "1:1"  # 'rollout:train' device split per host (hybrid: rollout share; training uses all)
    staleness_threshold: float = 0.0  # extra fraction of a sync window rollout may run ahead of the learner (0 = sync)
    trigger_parameter_sync_step: int = 1  # trainer updates between weight publications
    # micro-batches the trainer pulls per update; with streaming rl.micro_batches must equal it
    require_batches: int = 1
    partial_rollout: bool = False  # episodes in flight continue under new weights
    use_rollout_log_probs: bool = True  # True: behaviour log-probs as old; False: recompute proximal
    streaming: bool = False  # start backward on the first micro-batch; accumulate to one update
    num_slots: int = 1  # env slots posting requests independently (rollout async when > 1)
    num_generators: int = 1  # inference batchers the slots are routed over (fine-grained env sharding)
    max_batch: int = 0  # dynamic batching: fire at this many waiting requests (0 = all slots)
    max_wait_ms: float = 5.0  # dynamic batching: fire when the oldest request waited this long (T_max)
    adaptive_batching: bool = True  # dynamic batching also fires once every slot with a segment in flight has posted
    # a queue / pacing / weights wait fails after this long only if no other lane was busy meanwhile (stuck)
    queue_timeout_s: float = 120.0
    # a lane busy this long without a heartbeat is stalled (its first iteration, which compiles: 10x;
    # later ones: at least 3x its longest iteration)
    watchdog_s: float = 300.0

    def __post_init__(self):
        _check(self.staleness_threshold >= 0, "pipeline.staleness_threshold must be >= 0")
        _check(self.trigger_parameter_sync_step >= 1, "pipeline.trigger_parameter_sync_step must be >= 1")
        _check(self.require_batches >= 1 and self.num_slots >= 1, "pipeline.require_batches/num_slots must be >= 1")
        _check(self.max_batch >= 0 and self.max_wait_ms >= 0, "pipeline.max_batch/max_wait_ms must be >= 0")
        _check(self.queue_timeout_s > 0 and self.watchdog_s > 0, "pipeline timeouts must be > 0")
        _check(self.num_generators >= 1, "pipeline.num_generators must be >= 1")
        parts = self.placement_ratio.split(":")
        _check(len(parts) == 2 and all(p.isdigit() and int(p) >= 1 for p in parts),
               f"pipeline.placement_ratio={self.placement_ratio!r} must be 'rollout:train' with positive integers")


@dataclasses.dataclass(frozen=True)
class LiberoConfig:
    """LIBERO suites (env.suite 'libero_*'): the worker pool and its episodes (vlajax.libero; docs/libero.md).

    Read by `eval` and `rl` only when env.suite is a LIBERO suite (refused with a tabletop suite). LIBERO's 50
    fixed initial states per task are split: evaluation takes 0..24, demonstrations and RL's groups 25..49."""

    tasks: tuple[int, ...] = ()  # task indices, e.g. `--libero.tasks 0 3` (() = every task of the suite)
    episodes_per_task: int = 25  # eval and rl.eval_every: initial states 0..N-1 of each task (0..24 held out)
    train_inits: int = 25  # rl: the groups cycle initial states 25..25+N-1 (the demo states; 0..24 held out)
    workers: int = 2  # LIBERO worker processes
    envs_per_worker: int = 1  # env slots per worker (episodes at once)
    max_steps: int = 0  # step limit after the wait (0 = the suite's: 220 / 280 / 300 / 520)
    num_steps_wait: int = 10  # dummy-action steps at the start while objects settle (openpi: 10)
    env_seed: int = 7  # env.seed of every episode (openpi: 7; it moves objects even from a fixed initial state)
    replan_steps: int = 5  # eval: actions executed from each chunk before the next request (rl: rl.chunk_steps)
    # render side of both cameras (0 = from the policy: its image size, or 256 resized with pad for a policy
    # reading openpi's 224 px, as openpi's LIBERO example)
    camera_size: int = 0
    expert: bool = False  # eval: libero_spatial's scripted expert (object poses) instead of a policy
    robustness: str = ""  # eval: LIBERO-PRO axes, comma-separated (swap,lan,object,task,env) or 'all'
    render: Literal["policy", "all"] = "policy"  # eval: 'policy' renders only the frames requests read
    video: bool = True  # eval: a GIF per episode
    hang_timeout_s: float = 300.0  # a worker silent this long while holding episodes is restarted
    gl: Literal["egl", "osmesa"] = "egl"  # headless GL backend of the workers
    # where the workers run and where they find this process's endpoint (vlajax.libero.backend)
    backend: Literal["local", "ray"] = "local"  # local: processes of this host; ray: actors over a Ray cluster
    ray_address: str = "auto"  # ray: the cluster: auto ($RAY_ADDRESS or this host's `ray start`) or HOST:PORT
    bind: str = "127.0.0.1"  # the interface this process's policy endpoint listens on (0.0.0.0: every one)
    advertise: str = ""  # the host the workers connect to ('' = bind; with bind 0.0.0.0: this node's IP)
    cpus_per_worker: float = 1.0  # ray: CPUs each worker actor reserves on its node
    ray_libero_venv: str = ""  # ray: the LIBERO venv on the nodes ('' = each node's own)
    ray_repo: str = ""  # ray: the vlajax checkout on the nodes ('' = the one each actor imports)

    def __post_init__(self):
        _check(all(t >= 0 for t in self.tasks), f"libero.tasks must be task indices >= 0, got {self.tasks}")
        _check(1 <= self.episodes_per_task <= 50, "libero.episodes_per_task must be 1..50 (LIBERO has 50 initial "
               f"states per task; 0..24 are held out), got {self.episodes_per_task}")
        _check(1 <= self.train_inits <= 25, "libero.train_inits must be 1..25 (RL's groups start from initial "
               f"states 25..49), got {self.train_inits}")
        for name in ("workers", "envs_per_worker", "replan_steps"):
            _check(getattr(self, name) >= 1, f"libero.{name} must be >= 1, got {getattr(self, name)}")
        _check(self.max_steps >= 0 and self.num_steps_wait >= 0, "libero.max_steps and libero.num_steps_wait "
               "must be >= 0")
        _check(self.hang_timeout_s > 0, f"libero.hang_timeout_s must be > 0, got {self.hang_timeout_s}")
        _check(self.camera_size == 0 or self.camera_size >= 16,
               f"libero.camera_size must be 0 (from the policy) or >= 16, got {self.camera_size}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One run of vlajax: every section, a seed and where outputs go."""

    name: str = "debug"  # preset name (and run label)
    seed: int = 0  # root seed; every RNG stream is derived from it
    output_dir: str = "runs/debug"  # checkpoints, TensorBoard logs, reports
    compilation_cache_dir: str = "~/.cache/vlajax/jax"  # JAX persistent compilation cache ('' = off)
    mesh: MeshConfig = MeshConfig()
    model: ModelConfig = ModelConfig()
    env: EnvConfig = EnvConfig()
    data: DataConfig = DataConfig()
    sft: SFTConfig = SFTConfig()
    rl: RLConfig = RLConfig()
    pipeline: AsyncConfig = AsyncConfig()
    libero: LiberoConfig = LiberoConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    distributed: DistributedConfig = DistributedConfig()

    def __post_init__(self):
        m = self.mesh
        if self.model.num_heads and m.tp > 1:
            _check(
                self.model.num_heads % m.tp == 0,
                f"model.num_heads={self.model.num_heads} is not divisible by mesh.tp={m.tp}",
            )
            kv = self.model.num_kv_heads
            _check(
                kv % m.tp == 0 or m.tp % kv == 0,
                f"model.num_kv_heads={kv} neither divides nor is divisible by mesh.tp={m.tp}",
            )
        if m.sp > 1:
            _check(
                self.model.prefix_len % m.sp == 0,
                f"model prefix length {self.model.prefix_len} is not divisible by mesh.sp={m.sp}; "
                f"set model.seq_multiple to a multiple of {m.sp}",
            )
            _check(
                self.model.action_len % m.sp == 0,
                f"model action length {self.model.action_len} is not divisible by mesh.sp={m.sp}",
            )
        if m.dp > 0:
            _check(
                self.data.batch_size % m.dp == 0,
                f"data.batch_size={self.data.batch_size} is not divisible by mesh.dp={m.dp}",
            )
        _check(not (self.pipeline.enabled and self.pipeline.streaming and self.rl.normalize_advantages != "none"),
               f"pipeline.streaming with rl.normalize_advantages={self.rl.normalize_advantages!r}: the non-streaming "
               "update standardizes advantages over the whole global batch, which a gradient started on the first "
               "micro-batch cannot; set rl.normalize_advantages='none' or pipeline.streaming=false")
        _check(not (self.pipeline.enabled and self.pipeline.num_slots > 1 and self.rl.algo == "ppo"
                    and self.rl.critic == "privileged"),
               f"rl.critic='privileged' with pipeline.num_slots={self.pipeline.num_slots}: the env slots carry no "
               "privileged observations; use pipeline.num_slots=1 or rl.critic='head'")
        _check(not (self.rl.ratio_level == "factor" and self.env.obs_mode == "state"),
               "rl.ratio_level='factor' scores the entries of a VLA's chunk (tokens, flow-chain entries); the "
               "state-observation MLP policy (env.obs_mode='state') takes rl.ratio_level='decision'")
        if self.rl.algo == "grpo":
            _check(
                self.env.num_envs % self.rl.group_size == 0,
                f"env.num_envs={self.env.num_envs} is not divisible by rl.group_size={self.rl.group_size}",
            )

    def replace(self, **changes) -> TrainConfig:
        """A copy with top-level fields replaced (sections are replaced whole)."""
        return dataclasses.replace(self, **changes)


# ----------------------------------------------------------------------------------------
# Preset registry
# ----------------------------------------------------------------------------------------

_PRESETS: dict[str, tuple[str, Callable[[], TrainConfig]]] = {}


def register(name: str, description: str):
    """Decorator: register `fn() -> TrainConfig` as preset `name`. Names are unique."""

    def wrap(fn: Callable[[], TrainConfig]) -> Callable[[], TrainConfig]:
        if name in _PRESETS:
            raise ConfigError(f"preset {name!r} is registered twice")
        _PRESETS[name] = (description, fn)
        return fn

    return wrap


_presets_loaded = False


def _load_presets() -> None:
    """Import every module of `vlajax.config.presets` once (they register themselves)."""
    global _presets_loaded
    if not _presets_loaded:
        _presets_loaded = True
        # lazy: the preset modules import this one (they register into its registry)
        from vlajax.config import presets

        presets.load_all()


def preset_names() -> list[str]:
    _load_presets()
    return sorted(_PRESETS)


def preset_descriptions() -> dict[str, str]:
    _load_presets()
    return {name: desc for name, (desc, _) in sorted(_PRESETS.items())}


def get_config(name: str) -> TrainConfig:
    """The preset `name`; an unknown name raises `ConfigError` naming the closest presets."""
    _load_presets()
    if name not in _PRESETS:
        close = difflib.get_close_matches(name, _PRESETS, n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise ConfigError(f"unknown preset {name!r}; {hint}available: {', '.join(preset_names())}")
    cfg = _PRESETS[name][1]()
    return dataclasses.replace(cfg, name=name)
