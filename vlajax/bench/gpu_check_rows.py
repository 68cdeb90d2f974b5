"""The rows of the GPU check (`python -m vlajax.bench gpu-check`, `vlajax.bench.gpu_check`): their budgets, their
sizes (`GPU`, `DRY` for --dry-run) and their code, run inside the check's worker process (`run_row`).

Rows, in order (each with its own time budget and a status `ok`, `skipped: reason` or `failed: error`):

  pytest        `pytest -m gpu` over every test file that has a GPU-marked test
  sft:sft-small SFT steps (`sft.make_train_step`) of the sft-small VLA at GPU batch: bfloat16, then
                Transformer Engine FP8 (`model.fp8='te'`) from the same init on the same batches;
                tokens/s, loss after N steps, max |param bf16 - param fp8|; memory (below)
  sft:pi0       the same for π0 at openpi's widths (PaliGemma gemma_2b + gemma_300m expert, SigLIP
                So400m/14 at its full 27 blocks, rematerialized), at the largest Gemma depth of 18 / 6 / 2
                whose planned memory fits 70% of the device (`memory.reduced_depth`, SigLIP kept whole);
                `label` says what ran; FP8 is refused by the π config (recorded as skipped)
  attention     TE fused attention (packed rows, segment ids) and cuDNN vs the XLA reference, max error,
                at sft-small's and π0's head sizes
  env:mjx       rendered env steps/s of the tabletop goal suite at 256 / 1024 / 4096 envs (`bench env`'s
                `time_env`: MJX physics, JAX ray caster, both cameras)
  env:mjwarp    the same with MJX-Warp physics when warp imports
  rollout       decisions/s of the VLA rollout (`bench rollout`'s `time_head`, flow head) at 64 / 256 / 1024
  serve         `bench serve`: 1 / 4 / 16 / 64 closed-loop websocket clients against one server replica of the
                sft-small VLA on the device, the adaptive wait (the fair baseline): requests/s over one
                client's and p95 over its p50, paired per repeat
  async         `bench async`: sync vs train_async vs rollout_async, rl-ppo-flow, MJX, one short repeat
  rl:pi0        `bench async --model pi0`: PPO (rl-ppo-flow's head) of a π0-width policy on the MJX tabletop
                goal suite from pixels (224 px), sync vs train_async, at a few env counts; the deepest Gemma
                depth of `rl_pi_depths` that runs (an out-of-memory failure tries the next); decisions/s,
                seconds per iteration
  async:cpu-sim `bench async --regimes cpu-sim`: C MuJoCo tabletop slots on the host's cores, inference and the
                learner on the device: sync vs train_async vs rollout_async (adaptive batching)

MFU: every SFT and RL row carries its model FLOPs (`vlajax.models.flops`: per SFT sample, per decision,
per RL env step) times its rate over the device's dense peak (`flops.peak_flops` by device kind; None on
a CPU or an unlisted device).

Every sft row carries the step's memory: the planner's per-device prediction (`memory.plan`), XLA's
compiled `memory_analysis()` (argument + temp bytes) and, on GPU, the device's peak bytes in use after
the row (`peak_attributable`: whether this row raised the process's peak). The top-level `memory` list
gathers them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    budget_s: float  # killed after this (GPU sizes)
    min_s: float  # skipped when less than this is left before the deadline
    dry_budget_s: float = 0.0  # --dry-run: killed after this (0 = DRY_BUDGET_S)


# Budgets from two H200 runs (docs/gpu.md, 2026-11-28, 08:00 and 14:38 UTC): pytest 13 / 11 s, parity - / 108,
# sft-small 54 / 57, pi0 73 / 73, attention 12 / 9, env:mjx 77 / 70, rollout 105 / 148 (its first size compiled in
# 37 s, not 25), serve 111 / -, async - / 277 (a second call). The rows through rollout take ~480 s, so the 540 s
# deadline skips serve and async: each runs in a second call, one per loan (docs/gpu.md, "Running it").
ROWS = (Row("pytest", 90, 20), Row("parity", 150, 40), Row("sft:sft-small", 90, 40), Row("sft:pi0", 150, 60),
        Row("attention", 40, 10), Row("env:mjx", 120, 60), Row("env:mjwarp", 60, 30), Row("rollout", 200, 90),
        Row("serve", 150, 90), Row("async", 330, 150), Row("rl:pi0", 270, 150, 1500), Row("async:cpu-sim", 270, 150))
# rl:pi0 and async:cpu-sim have not run on a GPU yet: their budgets are estimates sized so that both fit one
# 540 s call (`--rows rl:pi0 async:cpu-sim`), or either one the second call of a loan (docs/gpu.md)
DRY_BUDGET_S = 300  # every row's budget in a dry run (a busy 2-core CPU compiles the tiny sizes in 0.5-2 min)
# except rl:pi0's: its dry run compiles a pi0-dummy RL loop (sync; train_async's collect and update are the same
# programs, served by the compile cache) at one Gemma layer, 2 envs and two timed updates; on a 2-core CPU at
# load 20 one such loop compiled in 5-12 min (the row's timings with an empty compile cache: docs/gpu.md)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Work per row: `GPU` by default, `DRY` with --dry-run."""

    sft_steps: int = 20  # timed steps after the compiling one
    small_batch: int = 256
    pi_family: str = "pi0"  # preset; depth picked by the planner from `pi_depths`
    pi_depths: tuple[int, ...] = (18, 6, 2)
    pi_batch: int = 32
    attn_len: int = 1024
    envs: tuple[int, ...] = (256, 1024, 4096)
    env_image: int = 64
    env_steps: int = 20
    repeats: int = 3
    rollout_envs: tuple[int, ...] = (64, 256, 1024)
    decisions: int = 10
    async_args: tuple[str, ...] = ("--preset", "rl-ppo-flow", "--regimes", "mjx", "--modes", "sync", "train_async",
                                   "rollout_async", "--repeats", "1", "--updates", "4", "--envs", "256", "--slots",
                                   "4", "--horizon", "8")
    serve_args: tuple[str, ...] = ("--clients", "1", "4", "16", "64", "--replicas", "1", "--seconds", "4",
                                   "--warmup-s", "1", "--repeats", "2")
    # rl:pi0: one bench per env count (`--envs` appended), the first depth that does not run out of memory
    rl_pi_envs: tuple[int, ...] = (16, 64)
    rl_pi_depths: tuple[int, ...] = (18, 6, 2)
    rl_pi_args: tuple[str, ...] = ("--preset", "rl-ppo-flow", "--model", "pi0", "--regimes", "mjx", "--modes", "sync",
                                   "train_async", "--repeats", "1", "--updates", "3", "--slots", "1", "--horizon", "4")
    cpu_sim_args: tuple[str, ...] = ("--preset", "rl-ppo-flow", "--regimes", "cpu-sim", "--modes", "sync",
                                     "train_async", "rollout_async", "--repeats", "1", "--updates", "4", "--envs",
                                     "128", "--slots", "8", "--horizon", "8")
    parity_k: str = "matches_openpi or parity"  # pytest -k of the parity row


GPU = Sizes()
DRY = Sizes(sft_steps=2, small_batch=4, pi_family="pi0-dummy", pi_depths=(0,), pi_batch=2, attn_len=32, envs=(2,),
            env_image=16, env_steps=2, repeats=1, rollout_envs=(2,), decisions=1,
            async_args=("--preset", "rl-debug", "--regimes", "mjx", "--modes", "sync", "train_async", "--repeats",
                        "1", "--updates", "2", "--envs", "2", "--slots", "1", "--horizon", "2"),
            serve_args=("--clients", "1", "2", "--replicas", "1", "--seconds", "1", "--warmup-s", "0.5", "--repeats",
                        "1"), parity_k="test_python_api_matches_openpi_policy and pi0_libero",  # (the suite runs all)
            rl_pi_envs=(2,), rl_pi_depths=(1,),
            rl_pi_args=("--preset", "rl-ppo-flow", "--model", "pi0-dummy", "--model-image-size", "28", "--regimes",
                        "mjx", "--modes", "sync", "train_async", "--repeats", "1", "--updates", "2", "--slots", "1",
                        "--horizon", "2"),
            cpu_sim_args=("--preset", "rl-debug", "--regimes", "cpu-sim", "--modes", "sync", "train_async",
                          "rollout_async", "--repeats", "1", "--updates", "2", "--envs", "4", "--slots", "2",
                          "--horizon", "2", "--width", "16"))


def skipped(reason: str) -> dict:
    return {"status": f"skipped: {reason}"}


def failed(e: BaseException) -> dict:
    msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return {"status": f"failed: {type(e).__name__}: {msg}", "oom": "RESOURCE_EXHAUSTED" in str(e)
            or "out of memory" in str(e).lower()}


def _guard(fn, *args, **kw) -> dict:
    """fn(...) -> dict with status 'ok' unless it says otherwise; any exception (OOM too) -> failed."""
    try:
        out = fn(*args, **kw)
        return {"status": "ok", **out} if "status" not in out else out
    except Exception as e:  # noqa: BLE001  (a row's failure is data, never the end of the check)
        return failed(e)


def _memory_stats() -> dict | None:
    import jax

    stats = jax.local_devices()[0].memory_stats()
    return {k: stats[k] for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit") if k in stats} if stats else None


def _pytest(args: list[str], files: list[str], budget: float, env: dict, passing: tuple[int, ...] = (0,)
            ) -> tuple[dict, list[str]]:
    """`pytest -q -rs ARGS FILES` in the repo on this backend. -> (the row: files, returncode, summary (pytest's
    last line), skip_reasons, and a failed status with the output's tail unless the exit code is `passing`;
    stdout's non-blank lines)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args, *files]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=max(budget - 5, 5))
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    summary = lines[-1].strip("= ") if lines else ""
    out = {"files": list(files), "returncode": p.returncode, "summary": summary,
           "skip_reasons": [ln for ln in lines if ln.startswith("SKIPPED")][:20]}
    if p.returncode not in passing:
        out["status"] = f"failed: pytest exit {p.returncode}: {summary}"
        out["tail"] = (p.stdout + p.stderr)[-3000:]
    return out, lines


def row_pytest(sz: Sizes, budget: float, env: dict) -> dict:
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                   if "mark.gpu" in p.read_text(errors="ignore"))
    if not files:
        return skipped("no test has the gpu marker")
    return _pytest(["-m", "gpu"], files, budget, env, passing=(0, 5))[0]  # 5: every test deselected


PARITY_FILES = ("tests/models/test_openpi_policy.py", "tests/models/test_openpi_parity.py")
FIXTURES = REPO.parent / "shared" / "fixtures" / "openpi"  # where those tests read openpi's reference data


def row_parity(sz: Sizes, budget: float, env: dict) -> dict:
    """openpi parity on this device: the fixture tests that compare our imported policies' actions (and the
    π0 / π0.5 forward) with openpi's float32 reference, run by pytest on this backend. Their printed
    errors (`max |ours - openpi ...|`, at 'highest' precision; on a GPU also at the default) are kept."""
    if not FIXTURES.is_dir():
        return skipped(f"openpi reference data not present ({FIXTURES}; gpu_check.sh --fixtures DIR puts a copy "
                       "there)")
    out, lines = _pytest(["-s", "-k", sz.parity_k], list(PARITY_FILES), budget, env)
    printed = [ln.strip(". ") for ln in lines]  # -s: a test's print follows the progress dots on its line
    return {**out, "fixtures": sorted(x.name for x in FIXTURES.iterdir()),
            "errors_printed": [ln for ln in printed if "max |ours - openpi" in ln or "max abs" in ln][:40]}


def synthetic_batch(mcfg, cameras: tuple[str, ...], n: int, seed: int) -> dict:
    """A fixed-batching loader batch of `n` samples (packing.collate + fixed_layout): random images,
    instructions of random length and state; actions a fixed function of the state (learnable)."""
    import numpy as np

    from vlajax.data.openpi import is_pi, prefix_spec
    from vlajax.data.packing import PrefixSpec, collate, fixed_layout

    spec = prefix_spec(mcfg) if is_pi(mcfg) else PrefixSpec.from_model(mcfg, cameras)
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(1234).standard_normal((mcfg.state_dim, mcfg.action_dim)).astype(np.float32)
    samples = []
    for i in range(n):
        k = int(rng.integers(3, mcfg.max_text_len + 1))
        state = rng.standard_normal(mcfg.state_dim).astype(np.float32)
        samples.append({
            "images": {c: rng.integers(0, 256, (mcfg.image_size, mcfg.image_size, 3), np.uint8) for c in spec.cameras},
            "tokens": np.where(np.arange(mcfg.max_text_len) < k,
                               rng.integers(3, min(1000, mcfg.vocab_size), mcfg.max_text_len), 0),
            "token_mask": np.arange(mcfg.max_text_len) < k, "state": state,
            "actions": np.tile(np.tanh(state @ w / 3), (mcfg.action_horizon, 1)),
            "action_mask": np.ones(mcfg.action_horizon, bool), "task_index": 0, "index": i})
    batch = collate(samples, spec, n)
    return {**batch, **fixed_layout(np.stack([spec.valid(s) for s in samples]), n)}


# the SFT rows time windows of `steps` steps, up to SFT_WINDOWS of them while the timed seconds stay under
# SFT_WINDOWS_S, and report the median window: one 20-step window of sft-small (0.5 s on an H200) gave
# 377,207 and 566,976 tokens/s in two runs; a 10 s pi0 window stays one window
SFT_WINDOWS, SFT_WINDOWS_S = 5, 4.0


def _sft_run(cfg, cameras, batches, steps: int, keep_params: bool = False) -> dict:
    """Init (seed 0), one compiling step, then windows of `steps` SFT steps on `batches` (cycled;
    see SFT_WINDOWS). -> figures: tokens/s the median window's, and each window's
    (+ '_params', float32 host copies, with `keep_params`)."""
    import jax
    import numpy as np

    from vlajax.models import build_model, fp8
    from vlajax.policies import memory
    from vlajax.policies.run_files import init_fn
    from vlajax.sft import loop as sft
    from vlajax.training import sharding

    mesh = sharding.make_mesh(cfg.mesh)
    rules = cfg.mesh.logical_rules
    peak0 = (_memory_stats() or {}).get("peak_bytes_in_use")
    with contextlib.ExitStack() as scope:
        if cfg.model.fp8 == "te":
            scope.enter_context(fp8.autocast("te", fp8.mesh_resource(mesh)))
        state, shardings = sharding.init_sharded(init_fn(cfg, cameras), mesh, rules, jax.random.key(0))
        step = sft.make_train_step(build_model(cfg.model), 1, cfg.sft.ema_decay, shardings, mesh)
        with sharding.use_mesh(mesh, rules):
            t0 = time.perf_counter()
            compiled = step.lower(state, batches[0]).compile()
            compile_s = time.perf_counter() - t0
            state, m = compiled(state, batches[0])
            first = float(m["loss"])
            jax.block_until_ready(state)
            windows, losses, i = [], [], 0  # (seconds, tokens) of each timed window of `steps` steps
            while steps and len(windows) < SFT_WINDOWS and sum(w[0] for w in windows) < SFT_WINDOWS_S:
                t0, tokens = time.perf_counter(), 0.0
                for _ in range(steps):
                    i += 1
                    state, m = compiled(state, batches[i % len(batches)])
                    losses.append(m["loss"])
                    tokens += m["prefix_tokens"] + m["action_tokens"]
                jax.block_until_ready(state)
                windows.append((time.perf_counter() - t0, float(tokens)))
            sec = windows[0][0] if windows else 0.0
    ma = compiled.memory_analysis()
    stats = _memory_stats()
    b = int(batches[0]["sample_mask"].shape[0])
    plan = memory.plan(cfg, jax.device_count(), b)
    xla = ma.argument_size_in_bytes + ma.temp_size_in_bytes if ma is not None else None
    peak = stats.get("peak_bytes_in_use") if stats else None
    mem = {"planned_bytes": plan["total"], "planned_activation_bytes": plan["activations"],
           "xla_argument_plus_temp_bytes": xla, "plan_over_xla": plan["total"] / xla if xla else None,
           "peak_bytes_in_use": peak, "plan_over_peak": plan["total"] / peak if peak else None,
           "peak_attributable": peak is not None and (peak0 is None or peak > peak0),
           "device_bytes_limit": stats.get("bytes_limit") if stats else None}
    tps = [t / w for w, t in windows]  # tokens/s of each window; the figure is their median
    from vlajax.models import flops

    kind = jax.devices()[0].device_kind
    per_sample = flops.train_sample(cfg.model, len(cameras))
    sps = float(np.median([b * steps / w for w, _ in windows])) if windows else None
    prec = "fp8" if cfg.model.fp8 == "te" else "bfloat16"
    achieved = per_sample * sps if sps else None
    out = {"model_flops_per_sample": per_sample, "model_flops_per_s": achieved, "device_kind": kind,
           "peak_flops": flops.peak_flops(kind, prec), "mfu": flops.mfu(achieved, kind, prec) if achieved else None,
           "mfu_vs_bf16_peak": flops.mfu(achieved, kind) if achieved else None,
           "batch": b, "steps_timed": steps, "windows": len(windows), "compile_s": round(compile_s, 2),
           "seconds": round(sec, 3), "seconds_windows": [round(w, 3) for w, _ in windows],
           "loss_first": first, "loss_after_steps": float(losses[-1]) if losses else first,
           "tokens_per_s": round(float(np.median(tps)), 1) if tps else None,
           "tokens_per_s_windows": [round(x, 1) for x in tps],
           "samples_per_s": round(float(np.median([b * steps / w for w, _ in windows])), 2) if windows else None,
           "memory": mem}
    if not np.isfinite([out["loss_first"], out["loss_after_steps"]]).all():
        out["status"] = f"failed: non-finite loss ({out['loss_first']} first, {out['loss_after_steps']} last)"
    if keep_params:
        out["_params"] = jax.tree.map(lambda x: np.asarray(x, np.float32), jax.device_get(state.params))
    del state, compiled
    return out


def _max_diff(a, b) -> float:
    import jax
    import numpy as np

    return float(max(np.max(np.abs(x - y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def sft_label(cfg, batch: int, cams: int) -> str:
    """What an SFT row ran, in words: the towers at their depths, remat, dtype, batch."""
    from vlajax.config.schema import GEMMA_VARIANTS, SIGLIP_VARIANTS

    m = cfg.model
    tail = f"{'remat, ' if m.remat else ''}{m.dtype}, batch {batch}, {cams} cameras"
    if m.family == "vla":
        return f"{m.name}: ViT {m.vit_width}x{m.vit_depth}, LM {m.width}x{m.depth}, {m.action_head} head; {tail}"
    vlm, exp = (m.paligemma_variant.split("@")[0], m.action_expert_variant.split("@")[0])
    full = SIGLIP_VARIANTS[m.siglip_variant.partition("/")[0]]["depth"]
    return (f"{m.family}: {vlm} + {exp} at {GEMMA_VARIANTS[m.paligemma_variant]['depth']} of "
            f"{GEMMA_VARIANTS[vlm]['depth']} layers, SigLIP {m.siglip_variant} at {m.siglip['depth']} blocks (the "
            f"variant's: {full}); {tail}")


def row_sft(sz: Sizes, budget: float, model: str) -> dict:
    import jax

    from vlajax.config.schema import MeshConfig, get_config
    from vlajax.data.openpi import model_slots
    from vlajax.models.attention import te_available
    from vlajax.policies import memory

    if model == "sft-small":
        base = get_config("sft-small")
        cams = tuple(sorted(base.env.cameras))
        cfg = base.replace(model=dataclasses.replace(base.model, dtype="bfloat16"), mesh=MeshConfig())
        batch, chosen = sz.small_batch, {}
    else:
        base = get_config(sz.pi_family)
        cams = model_slots(base.model)
        limit = (_memory_stats() or {}).get("bytes_limit")
        state_cache = {}
        for depth in sz.pi_depths:  # the largest Gemma depth whose plan fits 70% of the device; SigLIP whole
            cfg = memory.reduced_depth(base, depth) if depth else base
            cfg = cfg.replace(mesh=MeshConfig(), model=dataclasses.replace(cfg.model,
                                                                           siglip_depth=base.model.siglip_depth))
            state_cache[depth] = memory.plan(cfg, jax.device_count(), sz.pi_batch)["total"]
            if limit is None or state_cache[depth] <= 0.7 * limit:
                break
        batch, chosen = sz.pi_batch, {"depth": depth or "preset", "planned_bytes_by_depth": state_cache,
                                      "device_bytes_limit": limit}
    batches = [synthetic_batch(cfg.model, cams, batch, seed) for seed in range(4)]
    out = {"model": cfg.model.name, "family": cfg.model.family, "label": sft_label(cfg, batch, len(cams)), **chosen,
           "widths": {k: getattr(cfg.model, k) for k in ("paligemma_variant", "action_expert_variant",
                                                         "siglip_variant", "siglip_depth")}
           if cfg.model.family != "vla" else {k: getattr(cfg.model, k) for k in ("width", "depth", "vit_width")}}
    te_ok = cfg.model.family == "vla" and te_available()
    bf16 = _guard(_sft_run, cfg, cams, batches, sz.sft_steps, te_ok)
    p_bf16 = bf16.pop("_params", None)
    out["bf16"] = bf16
    if cfg.model.family != "vla":
        out["te_fp8"] = skipped(f"model.fp8='te' is not available for model.family={cfg.model.family!r} "
                                "(ModelConfig refuses it)")
    elif not te_available():
        out["te_fp8"] = skipped("Transformer Engine does not import here, or no GPU")
    else:
        te = _guard(_sft_run, cfg.replace(model=dataclasses.replace(cfg.model, fp8="te")), cams, batches,
                    sz.sft_steps, True)
        p_te = te.pop("_params", None)
        if p_bf16 is not None and p_te is not None:
            te["max_param_diff_vs_bf16"] = _max_diff(p_bf16, p_te)
            te["tokens_per_s_over_bf16"] = te["tokens_per_s"] / bf16["tokens_per_s"] if bf16.get("tokens_per_s") \
                else None
        out["te_fp8"] = te
    if not bf16["status"].startswith("ok"):
        out["status"] = bf16["status"]
    return out


def _attention_error(q, k, v, seg, pos, causal: bool, backend: str, ref) -> dict:
    import numpy as np

    from vlajax.models import attention

    got = np.asarray(attention.attend(q, k, v, seg, seg, pos, pos, causal=causal, backend=backend), np.float32)
    return {"max_abs_error": float(np.max(np.abs(got - ref)[np.asarray(seg > 0)]))}


def row_attention(sz: Sizes, budget: float) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vlajax.models import attention

    gpu = jax.default_backend() == "gpu"
    out, n = {}, sz.attn_len
    a, b, pad = n * 2 // 5, n // 2, n // 10  # three packed segments, then padding
    c = n - a - b - pad
    seg = jnp.asarray(np.tile(np.concatenate([np.full(a, 1), np.full(b, 2), np.full(c, 3), np.zeros(pad)]), (4, 1)),
                      jnp.int32)
    pos = jnp.asarray(np.tile(np.concatenate([np.arange(a), np.arange(b), np.arange(c), np.zeros(pad)]), (4, 1)),
                      jnp.int32)
    for name, (h, kvh, d) in {"sft-small": (4, 2, 32), "pi0": (8, 1, 256)}.items():
        ks = jax.random.split(jax.random.key(7), 3)
        q = jax.random.normal(ks[0], (4, n, h, d), jnp.bfloat16)
        k, v = (jax.random.normal(x, (4, n, kvh, d), jnp.bfloat16) for x in ks[1:])
        for causal in (False, True):
            ref = np.asarray(attention.attend(q, k, v, seg, seg, pos, pos, causal=causal, backend="xla"), np.float32)
            for backend in ("te", "cudnn"):
                key = f"{name} h{h} kv{kvh} d{d} {'causal' if causal else 'full'} {backend}"
                if not gpu:
                    out[key] = skipped(f"needs a GPU (backend {jax.default_backend()})")
                elif backend == "te" and not attention.te_available():
                    out[key] = skipped("Transformer Engine does not import here")
                else:
                    out[key] = _guard(_attention_error, q, k, v, seg, pos, causal, backend, ref)
    res = {"shape": f"[4, {n}, H, D], 3 packed segments + padding, bf16", "comparisons": out}
    if not gpu:  # the XLA references ran; nothing to compare them with
        res["status"] = f"skipped: TE / cuDNN attention need a GPU (backend {jax.default_backend()})"
    return res


def row_env(sz: Sizes, budget: float, impl: str) -> dict:
    import jax

    if impl == "warp":  # decided before importing the env bench (MuJoCo, MJX: seconds on a loaded CPU)
        if jax.default_backend() != "gpu":
            return skipped(f"MJX-Warp needs a GPU (backend {jax.default_backend()})")
        if importlib.util.find_spec("warp") is None:
            return skipped("warp (warp-lang) is not installed")
    from vlajax.bench.env import time_env

    t_end, rows = time.monotonic() + budget, []
    for n in sz.envs:
        if time.monotonic() > t_end - 10:
            rows.append({"num_envs": n, **skipped("the row's budget is spent")})
            continue
        rows.append({"num_envs": n, **_guard(time_env, "goal/put_in_square", n, True, sz.env_image, sz.env_steps,
                                             sz.repeats, impl)})
    return {"rows": rows, "task": "goal/put_in_square", "render": "JAX ray caster, agentview + wrist",
            "image_size": sz.env_image}


def _device_kind() -> str:
    import jax

    return jax.devices()[0].device_kind


def _mfu(flops_per_s: float | None) -> dict:
    """MFU fields of a rate of model FLOP/s on this device (bf16 dense peak)."""
    from vlajax.models import flops

    kind = _device_kind()
    return {"model_flops_per_s": flops_per_s, "device_kind": kind, "peak_flops": flops.peak_flops(kind),
            "mfu": flops.mfu(flops_per_s, kind) if flops_per_s else None}


def row_rollout(sz: Sizes, budget: float) -> dict:
    from vlajax.bench.rollout import model_config, time_head
    from vlajax.models import flops

    mcfg = model_config("small", "flow")[0]
    per_decision = flops.decision(mcfg, 2)  # the bench's goal suite renders both cameras
    t_end, rows = time.monotonic() + budget, []
    for n in sz.rollout_envs:
        if time.monotonic() > t_end - 15:
            rows.append({"num_envs": n, **skipped("the row's budget is spent")})
            continue
        r = _guard(time_head, "flow", n, sz.decisions, sz.repeats, 200, True, model_name="small") | {"num_envs": n}
        if r.get("decisions_per_s"):  # the whole rollout's time (physics, rendering) in the denominator
            r |= _mfu(per_decision * r["decisions_per_s"])
        rows.append(r)
    return {"rows": rows, "model": "sft-small VLA, flow head (bench rollout)", "model_flops_per_decision": per_decision}


def _bench(name: str, args: tuple[str, ...], budget: float, env: dict, path: pathlib.Path) -> dict:
    """`python -m vlajax.bench <name> --json <path> <args>` in a child process within `budget`. -> the JSON it
    wrote, or {'status': 'failed: ...', 'tail': its last output}."""
    cmd = [sys.executable, "-m", "vlajax.bench", name, "--json", str(path), *args]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=max(budget - 5, 5))
    if p.returncode != 0:
        return {"status": f"failed: bench {name} exit {p.returncode}", "tail": (p.stdout + p.stderr)[-3000:]}
    return json.loads(path.read_text())


ASYNC_KEEP = ("regime", "mode", "batching", "max_wait_ms", "env_steps_per_s", "updates_per_s", "speedup_vs_sync",
              "inference_batch_mean", "inference_active_mean", "inference_batch_over_active", "trainer_idle_ratio",
              "loadavg_1m")


def _async_rows(data: dict) -> list[dict]:
    """The bench's rows with their MFU (trained env steps/s x model FLOPs per env step: sampling + update),
    decisions/s and seconds per iteration."""
    w = data["meta"]["workload"]
    per_step = (w.get("model_flops") or {}).get("per_env_step")
    rows = []
    for r in data["rows"]:
        row = {k: r.get(k) for k in ASYNC_KEEP}
        row["decisions_per_s"] = r["env_steps_per_s"] / w["action_horizon"]
        row["seconds_per_iteration"] = 1.0 / r["updates_per_s"] if r.get("updates_per_s") else None
        row |= _mfu(per_step * r["env_steps_per_s"] if per_step else None)
        rows.append(row)
    return rows


def row_async(sz: Sizes, budget: float, env: dict, out_dir: pathlib.Path, args: tuple[str, ...] | None = None,
              name: str = "async") -> dict:
    args = sz.async_args if args is None else args
    data = _bench("async", args, budget, env, out_dir / f"{name.replace(':', '_')}.json")
    if "status" in data:
        return data
    return {"command": "python -m vlajax.bench async " + " ".join(args), "workload": data["meta"]["workload"],
            "reality": data["meta"]["reality"], "rows": _async_rows(data)}


def rl_pi_label(sz: Sizes, dry: bool) -> str:
    """What the rl:pi0 row runs, in words (the dry run's reduced sizes said as such)."""
    a = list(sz.rl_pi_args)
    flag = lambda name, default="": a[a.index(name) + 1] if name in a else default  # noqa: E731
    depths = "the preset's" if sz.rl_pi_depths == (0,) else f"the first of {list(sz.rl_pi_depths)} that fits"
    what = (f"{flag('--model')} (Gemma layers: {depths}), {flag('--model-image-size', "the preset's")} px, PPO "
            f"({flag('--preset')}'s head), MJX tabletop goal suite from pixels, envs {list(sz.rl_pi_envs)}, "
            f"timed updates: {flag('--updates')}, sync vs train_async")
    if dry:
        return ("dry run at reduced sizes, not pi0's widths: " + what + "; pi0-dummy is openpi's dummy Gemma "
                "(width 64) and SigLIP mu/14 at 2 blocks")
    return what


def row_rl_pi(sz: Sizes, budget: float, env: dict, out_dir: pathlib.Path) -> dict:
    """`bench async --model pi0` per env count; at each, the first depth of `rl_pi_depths` that does not run
    out of memory (0 = the model preset's own)."""
    t_end, runs = time.monotonic() + budget, []
    for n in sz.rl_pi_envs:
        for depth in sz.rl_pi_depths:
            left = t_end - time.monotonic()
            if left < 60:
                runs.append({"envs": n, "depth": depth, **skipped("the row's budget is spent")})
                break
            args = (*sz.rl_pi_args, "--envs", str(n), *(("--model-depth", str(depth)) if depth else ()))
            r = row_async(sz, left, env, out_dir, args, f"rl_pi0_envs{n}_depth{depth}")
            r = {"envs": n, "gemma_depth": depth or "preset", **r}
            runs.append(r)
            oom = "out of memory" in r.get("tail", "").lower() or "RESOURCE_EXHAUSTED" in r.get("tail", "")
            if not (r.get("status", "ok").startswith("failed") and oom):
                break
    out = {"label": rl_pi_label(sz, sz == DRY), "runs": runs}
    if runs and all(r.get("status", "ok").startswith("failed") for r in runs):
        out["status"] = runs[0]["status"]
    return out


def row_serve(sz: Sizes, budget: float, env: dict, out_dir: pathlib.Path) -> dict:
    data = _bench("serve", sz.serve_args, budget, env, out_dir / "serve.json")
    if "status" in data:
        return data
    keep = ("clients", "requests_per_s", "p50_ms", "p95_ms", "mean_batch", "rps_over_1", "p95_over_p50_1")
    return {"command": "python -m vlajax.bench serve " + " ".join(sz.serve_args),
            "servers": [{"replicas": e["server_replicas"], "wait_rule": e["wait_rule"],
                         "rows": [{k: r.get(k) for k in keep} for r in e["rows"]], "targets": e.get("targets")}
                        for e in data["summary"]]}


def run_row(name: str, sz: Sizes, budget: float, env: dict, out_dir: pathlib.Path) -> dict:
    kind, _, arg = name.partition(":")
    if kind == "pytest":
        return row_pytest(sz, budget, env)
    if kind == "parity":
        return row_parity(sz, budget, env)
    if kind == "sft":
        return row_sft(sz, budget, arg)
    if kind == "attention":
        return row_attention(sz, budget)
    if kind == "env":
        return row_env(sz, budget, {"mjx": "jax", "mjwarp": "warp"}[arg])
    if kind == "rollout":
        return row_rollout(sz, budget)
    if kind == "serve":
        return row_serve(sz, budget, env, out_dir)
    if kind == "rl":
        return row_rl_pi(sz, budget, env, out_dir)
    if arg == "cpu-sim":
        return row_async(sz, budget, env, out_dir, sz.cpu_sim_args, name)
    return row_async(sz, budget, env, out_dir)
