#!/usr/bin/env bash
# Collects the wheels `scripts/gpu_check.sh` installs on a GPU machine that has no network.
# Run it here (a machine with PyPI), in the repo root:
#
#   bash scripts/collect_wheels.sh [DIR] [PROFILE]       DIR default .whl, PROFILE default device
#
# Profiles (every version is the one pyproject.toml pins, or the one `make venv` resolves):
#   device  what the lent GPU machine's image lacks, sized for its 64 MiB carry limit (30 MiB; the tracked
#           tree is ~17 MiB more). mujoco's viewer parts (mujoco-studio, glfw, pyopengl: 16 MiB) are left
#           out: vlajax renders with MJX, never with MuJoCo's OpenGL viewer.
#           That image (/work/.library/device/KINDS.md) has Python 3.12, jaxlib 0.11.2 with the
#           CUDA 13 plugin, numpy, scipy, tensorstore, pytest, ... . jax 0.12.0.1 is pure Python and
#           accepts jaxlib >= 0.11.2 (its METADATA: jaxlib<=0.12.0.1,>=0.11.2), so it runs on the
#           image's jaxlib and CUDA 13 plugin; the wheels carry jax, flax, optax, orbax, chex at
#           the pins, and vlajax's own needs (grain, mujoco, mjx, tyro, ...).
#           NOT in it: jaxlib 0.12.0.1 (87 MB), jax-cuda12/13-pjrt (135-190 MB), warp-lang (149 MB,
#           MJX-Warp): each alone is over the carry limit, so on that machine the check records the
#           image's jaxlib and skips MJWarp ("warp not importable"). Transformer Engine's JAX part is
#           source-only on PyPI (scripts/install_te.sh builds it against CUDA + cuDNN, tens of
#           minutes): no wheel; the check skips TE sections with the reason.
#   full    everything for a bare CUDA 12 machine without the size limit: the device profile plus
#           jax[cuda12] (jaxlib, jax-cuda12-plugin, jax-cuda12-pjrt and the nvidia-*-cu12 libraries,
#           several GB), warp-lang (MJX-Warp), and the image's packages vlajax needs.
#
# Then on the GPU machine (see docs/gpu.md): bash scripts/gpu_check.sh --wheels DIR --out OUT.
# `pip download` only: nothing is installed here. One version per package (two stop the install).
set -euo pipefail
dir="${1:-.whl}"
profile="${2:-device}"
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
fail() { echo "error: $*" >&2; exit 2; }
case "$profile" in device|full) ;; *) fail "profile must be 'device' or 'full', got '$profile'" ;; esac

# vlajax's pins (pyproject.toml) and the dependencies the device image lacks, as `make venv` resolved them.
device=(
  jax==0.12.0.1 flax==0.12.12 optax==0.2.8 orbax-checkpoint==0.12.8 chex==0.1.92
  grain==0.2.18 array-record==0.8.6 portpicker==1.6.0
  mujoco==4.0.0 mujoco-core==4.0.0 mujoco-mjx==3.17.0 trimesh==5.2.0
  tensorboardx==2.6.5 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1
  simpy==4.1.2 websockets==17.4 msgpack==1.2.4 sentencepiece==0.2.3
)
full=(
  jaxlib==0.12.0.1 jax-cuda12-plugin==0.12.0.1 jax-cuda12-pjrt==0.12.0.1
  nvidia-cublas-cu12 nvidia-cuda-cupti-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12 nvidia-cudnn-cu12
  nvidia-cufft-cu12 nvidia-cusolver-cu12 nvidia-cusparse-cu12 nvidia-nccl-cu12 nvidia-nvjitlink-cu12
  nvidia-nvshmem-cu12
  warp-lang==1.18.0 mujoco-studio==4.0.0 glfw==2.11.0 pyopengl==3.1.10
  numpy scipy ml-dtypes opt-einsum tensorstore treescope etils absl-py cloudpickle protobuf rich pyyaml
  typing-extensions msgpack humanize simplejson psutil aiofiles prometheus-client uvloop packaging pillow
  pyarrow jaxtyping wadler-lindig pytest pytest-timeout pluggy iniconfig
)
names=("${device[@]}")
[ "$profile" = full ] && names+=("${full[@]}")

mkdir -p "$dir"
echo "[collect_wheels] $profile profile: ${#names[@]} packages -> $dir"
# manylinux tags up to 2_28 (the image's glibc is newer); cp312 or pure-Python wheels only.
"$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_5_x86_64 -d "$dir" "${names[@]}"
size=$(du -sm "$dir" | cut -f1)
echo "[collect_wheels] $dir: $(ls "$dir" | wc -l) wheels, ${size} MiB"
if [ "$profile" = device ] && [ "$size" -ge 40 ]; then
  fail "$dir is ${size} MiB: the device tool carries at most 64 MiB with the tree, ~17 MiB (remove other files from $dir)"
fi
