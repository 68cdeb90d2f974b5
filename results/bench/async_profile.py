"""Where the time of the bench's rl workload goes (docs/async.md, third session).

    .venv/bin/python results/bench/async_profile.py --width 256 --update-epochs 1 --minibatches 1
    .venv/bin/python results/bench/async_profile.py --width 1024 --update-epochs 10 --minibatches 4

Prints, without any simulated latency: the MJX env step and the inference call per decision for
one slot of 16 envs and for 4 slots of 4, the PPO update, and 4 slot threads x 8 decisions run one
after the other vs concurrently (do the lanes serialize on the GIL or on XLA dispatch?).
"""

import argparse
import threading
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

from research.bench import async_ as B  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--update-epochs", type=int, default=1)
    ap.add_argument("--minibatches", type=int, default=1)
    a = ap.parse_args()
    w, _ = B.rl_workload("rl-debug", envs=16, horizon=8, width=a.width, update_epochs=a.update_epochs,
                         minibatches=a.minibatches)
    dev = jax.devices()[0]
    state = jax.device_put(w.init_state(0), dev)
    params = jax.tree.map(lambda x: x.copy(), state.params)  # the update donates the state
    print(f"width {a.width}, {a.update_epochs} epochs x {a.minibatches} minibatches, load {B.os.getloadavg()[0]:.1f}")
    for n in (1, 4):
        reset, step, infer = w.env(n, None)
        envs = {s: reset(s) for s in range(n)}
        segs = {s: [] for s in range(n)}
        ti = ts = 0.0
        for d in range(3 * 8):  # 8 decisions of warm-up (compiles), then 16 timed
            t0 = time.perf_counter()
            outs = infer(params, [envs[s][1] for s in range(n)])
            jax.block_until_ready(outs[0][0])
            t1 = time.perf_counter()
            for s in range(n):
                es, obs, rec = step(s, envs[s][0], outs[s])
                envs[s] = (es, obs)
                segs[s].append(rec)
            jax.block_until_ready(rec)
            if d >= 8:
                ti, ts = ti + t1 - t0, ts + time.perf_counter() - t1
        print(f"{n} slot(s) of {16 // n} envs: per decision, inference {ti / 16 * 1e3:.1f} ms, "
              f"env step (all slots) {ts / 16 * 1e3:.1f} ms")
        from vlajax.pipeline.buffer import Trajectory
        from vlajax.pipeline.slots import _stack
        items = [Trajectory(_stack(segs[s][-8:]), jax.numpy.zeros(8), 16 // n, 16 // n * 8 * 2) for s in range(n)]
        tr = w.trainer(dev, False, n)
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            state, _m = tr(state, iter(items))
            times.append(time.perf_counter() - t0)
        print(f"{n} slot(s): PPO update (128 decisions) {min(times[1:]) * 1e3:.0f}-{max(times[1:]) * 1e3:.0f} ms")
    reset, step, infer = w.env(4, None)
    envs = {s: reset(s) for s in range(4)}

    def run_slot(s, k):
        es, obs = envs[s]
        for _ in range(k):
            es, obs, rec = step(s, es, infer(params, [obs])[0])
        jax.block_until_ready(rec)

    run_slot(0, 2)
    for _ in range(2):
        t0 = time.perf_counter()
        for s in range(4):
            run_slot(s, 8)
        seq = time.perf_counter() - t0
        threads = [threading.Thread(target=run_slot, args=(s, 8)) for s in range(4)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        par = time.perf_counter() - t0
        print(f"4 slots x 8 decisions: one after the other {seq * 1e3:.0f} ms, 4 threads {par * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
