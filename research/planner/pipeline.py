"""One configuration of the pipeline the planner models (`research.planner.sim`): workload shape, mode, placement,
and the model's options.

    pipe = Pipeline(envs=16, horizon=8, steps_per_decision=2, mode="+partial_rollout", slots=4)
"""

from __future__ import annotations

import dataclasses

__all__ = ["MODES", "PLACEMENTS", "Pipeline"]

MODES = ("sync", "train_async", "rollout_async", "train_async+rollout_async", "+streaming", "+partial_rollout")
PLACEMENTS = ("colocated", "disaggregated", "hybrid")


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """One configuration: workload shape, mode (as `research.bench.async_.mode_config` sets it), placement."""

    envs: int  # envs in the whole run
    horizon: int  # decisions per segment (rl.rollout_length)
    steps_per_decision: int  # low-level env steps per decision and env (the executed chunk)
    mode: str = "sync"
    slots: int = 4  # env slots per rollout device in the slot modes (1 in sync / train_async)
    generators: int = 1  # inference batchers per rollout device
    max_batch: int = 0  # dynamic batching: fire at this many requests (0 = all slots of a generator)
    max_wait_s: float = 0.002  # dynamic batching: fire when the oldest request waited this long (T_max if adaptive)
    # the lane's adaptive rule (`pipeline.adaptive_batching`, its default): a call also fires as soon as every slot
    # with a segment in flight has posted (a slot blocked in admission -- pacing, a weight switch -- is not waited
    # for); False: only `max_batch` / `max_wait_s`
    adaptive: bool = True
    trigger: int = 1  # K: updates between publications
    placement: str = "colocated"
    devices: int = 1
    ratio: tuple[int, int] = (1, 1)  # rollout:train share of the devices (disaggregated / hybrid)
    updates: int = 8  # timed updates (after one warm-up update)
    # model option (issue 44.5): concurrent slot steps share their measured concurrency cap first come, first
    # served, so they finish -- and post their requests to the batcher -- one after another (False: equally,
    # in lockstep: every call then gathers all slots that started together)
    fifo_steps: bool = False
    # model option (issue 44.5, second try): each slot step's and inference call's seconds x a factor drawn from
    # the profile's timed calls of it (`Costs.jitter`, mean 1), so slots that start together end apart
    jitter: bool = False
    # updates after the first excluded from the measured window too (issue 44.5, third: the real runs' warm-up)
    warmup: int = 0
    # model option (issue 44.5, fifth try): concurrent slot steps demand at most capacity / their measured
    # concurrency cores per solo-speed unit, so together they reach the concurrency the profile measured
    # (`sharing.Shared.group_cores`; False: their solo cores, water-filled before the cap)
    group_cores: bool = False
    # model option (issue 44.5, tenth try): a slot posts its next request when its step has been dispatched
    # (`costs.dispatch_s`: JAX returns before the step has computed; the dispatch is Python under the GIL, one
    # thread at a time), the rest of the step computing after it; an inference call starts once the steps of
    # its batch have computed (False: a slot posts once its step has computed)
    async_dispatch: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if not 0 <= self.warmup < self.updates:
            raise ValueError(f"warmup must be in [0, updates={self.updates}), got {self.warmup}")
        r = self.rollout_devices
        if r < 1 or (self.placement == "disaggregated" and self.devices - r < 1):
            raise ValueError(f"{self.devices} devices do not split {self.ratio[0]}:{self.ratio[1]}")
        if self.envs % (r * self.num_slots):
            raise ValueError(f"{self.envs} envs do not split into {r} rollout devices x {self.num_slots} slots")

    @property
    def slot_modes(self) -> bool:
        return self.mode not in ("sync", "train_async")

    @property
    def num_slots(self) -> int:  # per rollout device
        return self.slots if self.slot_modes else 1

    @property
    def staleness(self) -> float:
        return 0.0 if self.mode in ("sync", "rollout_async") else 1.0

    @property
    def streaming(self) -> bool:
        return self.mode in ("+streaming", "+partial_rollout")

    @property
    def partial(self) -> bool:
        return self.mode == "+partial_rollout"

    @property
    def rollout_devices(self) -> int:
        if self.placement == "colocated":
            return self.devices
        return self.devices * self.ratio[0] // sum(self.ratio)

    @property
    def train_devices(self) -> tuple[int, ...]:
        """Indices of the training devices (rollout devices are 0 .. R-1)."""
        if self.placement == "disaggregated":
            return tuple(range(self.rollout_devices, self.devices))
        return tuple(range(self.devices))
