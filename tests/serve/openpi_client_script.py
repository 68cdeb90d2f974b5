"""Run under the openpi-client venv (numpy<2): drive a vlajax server with openpi's own client.

    python openpi_client_script.py HOST PORT REQUESTS
Prints one JSON line: metadata keys, action shapes, the error text of a bad request, and
that the connection still served afterwards. Builds each request from the metadata alone.
"""

import json
import sys

import numpy as np
from openpi_client import websocket_client_policy


def build(spec, rng):
    obs = {}
    for key, entry in spec.items():
        if entry["dtype"] == "str":
            obs[key] = "press the button"
        elif entry["dtype"] == "uint8":
            obs[key] = rng.integers(0, 256, tuple(entry["shape"]), dtype=np.uint8)
        else:
            obs[key] = rng.standard_normal(tuple(entry["shape"])).astype(entry["dtype"])
    return obs


def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = websocket_client_policy.WebsocketClientPolicy(host=host, port=port)
    meta = client.get_server_metadata()
    rng = np.random.default_rng(0)
    shapes, finite = [], True
    for _ in range(n):
        out = client.infer(build(meta["observation"], rng))
        shapes.append(list(out["actions"].shape))
        finite &= bool(np.all(np.isfinite(out["actions"])) and np.all(np.abs(out["actions"]) <= 1))
    bad = build(meta["observation"], rng)
    bad.pop(next(k for k, e in meta["observation"].items() if e["dtype"] == "uint8"))
    try:
        client.infer(bad)
        error = None
    except RuntimeError as e:
        error = str(e)
    after = list(client.infer(build(meta["observation"], rng))["actions"].shape)
    print(json.dumps({"observation": meta["observation"], "action": meta["action"], "policy": meta["policy"],
                      "shapes": shapes, "finite": finite, "error": error, "after_error": after,
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
