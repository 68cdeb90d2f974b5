"""How a LIBERO worker process is started, on whichever host runs it: the LIBERO venv's python, the command
line and the environment. Standard library only (no jax, no ray): the Ray backend's actors import it on
every node (`vlajax.libero.ray_pool`), the local pool on this host (`vlajax.libero.pool`).

The LIBERO venv is `<repo>/.venv-libero` (`make libero`), or `$VLAJAX_LIBERO_VENV`.
"""

from __future__ import annotations

import os

__all__ = ["REPO", "LiberoEnvMissing", "libero_python", "libero_venv", "worker_command", "worker_env"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LiberoEnvMissing(RuntimeError):
    """The LIBERO venv is not there (the text says how to create it)."""


def libero_venv() -> str:
    return os.environ.get("VLAJAX_LIBERO_VENV") or os.path.join(REPO, ".venv-libero")


def libero_python(venv: str | None = None) -> str:
    """The python of the LIBERO venv `venv` (default `libero_venv()`), or LiberoEnvMissing naming the command
    that creates it."""
    venv = venv or libero_venv()
    py = os.path.join(venv, "bin", "python")
    if not (os.path.isfile(os.path.join(venv, ".installed")) and os.access(py, os.X_OK)):
        raise LiberoEnvMissing(f"the LIBERO environment {venv} is missing; create it with `make libero` "
                               f"(or `bash scripts/setup_libero.sh {venv}`)")
    return py


def worker_command(python: str, envs: int, gl: str, policy_url: str | None, frames_dir: str | None) -> list[str]:
    """The LIBERO worker's command line (`vlajax.libero.worker`)."""
    cmd = [python, "-u", "-m", "vlajax.libero.worker", "--envs", str(envs), "--gl", gl]
    if policy_url:
        cmd += ["--policy", policy_url]
    if frames_dir:
        cmd += ["--frames-dir", frames_dir]
    return cmd


def worker_env(repo: str, gl: str, extra: dict[str, str]) -> dict[str, str]:
    """The LIBERO worker's environment: this process's, `repo` on PYTHONPATH (the worker imports
    `vlajax.libero.protocol` from it), the GL backend, none of our JAX settings (the worker has no jax) and not
    our venv."""
    env = {**os.environ, "PYTHONPATH": repo, "MUJOCO_GL": gl, "PYOPENGL_PLATFORM": gl, **extra}
    for k in ("JAX_PLATFORMS", "XLA_FLAGS", "VIRTUAL_ENV"):
        env.pop(k, None)
    return env
