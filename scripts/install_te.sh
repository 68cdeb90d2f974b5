#!/usr/bin/env bash
# Installs NVIDIA Transformer Engine's JAX part (model.attention='te', model.fp8='te') into a venv
# that already has vlajax with the `gpu` extra:
#   .venv/bin/pip install -e '.[gpu]' && bash scripts/install_te.sh [.venv]
# TE's JAX extension is source-only on PyPI: pip builds it against this machine's CUDA toolkit and
# cuDNN (tens of minutes). Without a CUDA GPU, nvcc or cuDNN it stops with one `error:` line
# before downloading anything; vlajax runs without TE (attention 'xla' / fp8 'flax').
set -euo pipefail
TE_VERSION="2.20.2"
venv="${1:-.venv}"
py="$venv/bin/python"
fail() { echo "error: $*" >&2; exit 1; }

[ -x "$py" ] || fail "no Python at $py (run 'make venv' first, or pass the venv directory)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
  || fail "Transformer Engine needs a CUDA GPU: nvidia-smi finds none on this machine (vlajax runs without TE)"
cuda_home="${CUDA_HOME:-${CUDA_PATH:-}}"
if [ -z "$cuda_home" ] && command -v nvcc >/dev/null 2>&1; then
  cuda_home="$(dirname "$(dirname "$(command -v nvcc)")")"
fi
[ -n "$cuda_home" ] && [ -x "$cuda_home/bin/nvcc" ] \
  || fail "Transformer Engine builds against the CUDA toolkit: no nvcc found (set CUDA_HOME to the toolkit, e.g. /usr/local/cuda)"
cudnn_found=0
for d in "${CUDNN_PATH:-}" "$cuda_home" /usr /usr/local; do
  [ -n "$d" ] || continue
  if ls "$d"/include/cudnn*.h "$d"/include/*/cudnn*.h >/dev/null 2>&1; then cudnn_found=1; break; fi
done
[ "$cudnn_found" = 1 ] || "$py" -c "import nvidia.cudnn" >/dev/null 2>&1 \
  || fail "Transformer Engine needs cuDNN headers: none under \$CUDNN_PATH, $cuda_home, /usr or /usr/local (install cuDNN or 'pip install nvidia-cudnn-cu12', set CUDNN_PATH)"
"$py" -c "import jax; assert jax.default_backend() == 'gpu', jax.default_backend()" >/dev/null 2>&1 \
  || fail "jax in $venv does not see the GPU: install the gpu extra first ($py -m pip install -e '.[gpu]')"

echo "[install_te] building transformer-engine[jax]==$TE_VERSION against $cuda_home (this takes a while)"
export CUDA_HOME="$cuda_home" NVTE_FRAMEWORK=jax
"$py" -m pip install --no-build-isolation "transformer-engine[jax]==$TE_VERSION"
"$py" -c "import transformer_engine.jax as te; print('[install_te] ok: transformer_engine', te.__version__ if hasattr(te, '__version__') else '')"
