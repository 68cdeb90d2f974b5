"""Issue 43: which Orbax call sites carry the per-save growth? An experiment, not a fix.

    .venv/bin/python results/bench/soak_43/orbax_call_sites.py VARIANT [LEAVES]

Saves a 64 KiB pytree split into LEAVES float32 arrays 800 times (`ocp.CheckpointManager`, max_to_keep 3,
force, waiting after each) and prints KiB of RSS per save over saves 200-800. VARIANT letters switch off
one tensorstore call each by replacing it inside Orbax (private modules; for measuring only):
M: the raw-bytes probe (`experimental_collect_matching_metrics`, twice per save, for a log line);
K: the OCDBT base spec resolution (`KvStore.Spec(...).to_json()`, once per array): resolved once per
directory instead; Z: the zarr metadata read-back (`t.spec().to_json()`, once per array). `base`: none.
"""
import copy, functools, gc, json, os, shutil, sys, types
import jax.numpy as jnp
import orbax.checkpoint as ocp
from orbax.checkpoint._src.serialization import tensorstore_utils as tsu
import tensorstore as ts
patch = sys.argv[1]
if "M" in patch:
    tsu.get_tensorstore_raw_bytes = lambda direction=None: 0
if "K" in patch:
    real = ts
    @functools.lru_cache(maxsize=64)
    def resolved(s): return real.KvStore.Spec(json.loads(s)).to_json()
    class _Spec:
        def __init__(self, spec): self._s = json.dumps(spec, sort_keys=True)
        def to_json(self): return copy.deepcopy(resolved(self._s))
    proxy = types.ModuleType("tensorstore_proxy"); proxy.__dict__.update(real.__dict__)
    proxy.KvStore = types.SimpleNamespace(Spec=_Spec, open=real.KvStore.open)
    tsu.ts = proxy
if "Z" in patch:
    orig = tsu.array_metadata_from_tensorstore
    class _T:  # hide spec(): zarr metadata best-effort -> None
        def __init__(s, t): s.base = None
    tsu.array_metadata_from_tensorstore = lambda t, info, sharding=None: orig(_T(t), info, sharding)
d = "/tmp/patch_orbax_" + patch; shutil.rmtree(d, ignore_errors=True)
L = int(sys.argv[2]) if len(sys.argv) > 2 else 16
tree = {f"w{i}": jnp.full((1024 * 16 // L,), float(i), jnp.float32) for i in range(L)}
m = ocp.CheckpointManager(d, options=ocp.CheckpointManagerOptions(max_to_keep=3, create=True))
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def go(a, b):
    for i in range(a, b):
        m.save(i, args=ocp.args.Composite(state=ocp.args.StandardSave(tree)), force=True); m.wait_until_finished()
go(1, 200); gc.collect(); r1 = rss()
go(200, 800); gc.collect(); r2 = rss()
print(patch, L, "leaves", f"{(r2-r1)*1024/600:.2f} KiB/save")
