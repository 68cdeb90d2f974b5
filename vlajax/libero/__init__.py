"""LIBERO / LIBERO-PRO tasks as simulator worker processes (docs/libero.md).

Modules, lowest first: `protocol` (conventions, wire keys, the parent <-> worker channel; numpy only),
`worker` (runs in the LIBERO venv: LIBERO envs as an openpi-protocol client), `pool` (the parent
side in our .venv: spawns, feeds, restarts workers), `evaluate` (the `eval --suite libero_*` command).
Importing this package imports nothing (the worker side must not pull in jax).
"""
