"""Research benchmarks: `python -m research.bench NAME --json PATH` (from a checkout).

A benchmark is a module `research.bench.<name>` with `main(argv: list[str]) -> int`; the user
benchmarks are `python -m vlajax.bench`.
"""

BENCHMARKS: dict[str, str] = {
    "rl_peer": "vlajax sync PPO vs brax PPO env steps/s on one state task",
    "rl_peer_profile": "where the time of the rl_peer comparison goes",
    "rollout_profile": "the pixel rollout's parts timed one by one",
    "soak": "long async run: RSS and every pipeline structure sampled each minute",
    "async_libero": "the async loops on real LIBERO workers beside the planner's prediction",
}
