"""`python -m vlajax.train rl`: the synchronous loop (`vlajax.rl.loop`) or, with
`--pipeline.enabled`, the asynchronous one (`vlajax.rl.async_loop`)."""

from __future__ import annotations

from vlajax.config.schema import TrainConfig
from vlajax.rl import async_loop, loop
from vlajax.rl.setup import run_and_report

__all__ = ["run"]


def run(cfg: TrainConfig) -> int:
    """Run the `rl` command; 0 on success, 1 on a non-finite update (one `error:` line printed)."""
    if cfg.pipeline.enabled:
        return async_loop.run_async(cfg)
    return run_and_report(cfg, loop.train, lambda s: {k: v for k, v in s.items() if k not in ("history", "state")})
