"""Issue 43: two tensorstore calls that Orbax makes on every save leave Python memory behind.

    .venv/bin/python results/bench/soak_43/tensorstore_refleak.py

No vlajax, no Orbax: tensorstore alone. Prints, per call, the RSS growth and the Python memory still
traced after `gc.collect()`, for the two calls Orbax makes on every checkpoint save:
`ts.experimental_collect_matching_metrics('/tensorstore/kvstore/')` (twice per save, for a throughput log
line) and `ts.KvStore.Spec(spec).to_json()` (once per array per save, resolving the OCDBT base spec), and a
control that builds the same spec without converting it to JSON. What holds the memory was not found (the
returned dict's own reference count is normal); tracemalloc attributes it to the Python objects of the
conversion, and it is the same in tensorstore 0.1.65, 0.1.71, 0.1.75, 0.1.80 and 0.1.86, Python 3.11 and 3.12.
"""
import gc
import json
import sys
import tempfile
import tracemalloc

import tensorstore as ts


def rss_kib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1024


def per_call(fn, n: int = 20000) -> dict:
    for i in range(n // 10):
        fn(i)
    gc.collect()
    r0 = rss_kib()
    tracemalloc.start()
    for i in range(n):
        fn(i)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"rss_kib_per_call": round((rss_kib() - r0) / n, 3), "traced_bytes_per_call": round(traced / n, 1)}


d = tempfile.mkdtemp()
kv = ts.KvStore.open({"driver": "file", "path": d + "/"}).result()
kv.write("a", b"x" * 1000).result()  # the file driver's metrics exist from now on (as after a save)
spec = {"driver": "file", "path": d + "/step/"}
out = {
    "collect_matching_metrics": per_call(lambda i: ts.experimental_collect_matching_metrics("/tensorstore/kvstore/")),
    "kvstore_spec_to_json": per_call(lambda i: ts.KvStore.Spec(spec).to_json()),
    "kvstore_spec_only (control)": per_call(lambda i: ts.KvStore.Spec(spec)),
    "python": sys.version.split()[0],
}
print(json.dumps(out, indent=1))
