"""`python -m vlajax.policies.import_openpi` reads `--size` from the checkpoint's parameter shapes: the reference
checkpoints (openpi's layout at the dummy size) infer 'dummy'; a `--size` their shapes do not fit is one short
`error:` line naming three leaves and the flag, exit 2, nothing written; a checkpoint of another family is one
short line too (3 leaves per kind, not every leaf). Metadata only: nothing here builds a model. Data:
`../shared/fixtures/openpi/` (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "openpi"
POLICIES = SHARED / "policies"

pytestmark = pytest.mark.skipif(not POLICIES.is_dir(), reason=f"openpi reference data not present ({SHARED})")


def _error(capsys, args: list[str]) -> str:
    from vlajax.policies.import_openpi import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def test_the_size_is_read_from_the_shapes():
    from vlajax.policies.import_openpi import SIZE_LEAVES, infer_size, read_shapes

    for config in ("pi0_libero", "pi05_libero"):
        ckpt = str(POLICIES / config / "ckpt")
        assert infer_size(ckpt, config) == "dummy" and infer_size(ckpt, config, "dummy") == "dummy"
        shapes = read_shapes(ckpt)
        assert [shapes[k][-1] for k in SIZE_LEAVES] == [64, 64, 32]  # dummy Gemma x 2, SigLIP mu
    assert infer_size(str(SHARED / "pi0"), "pi0_droid") == "dummy"  # a bare params tree (no assets) too


def test_a_wrong_size_is_one_short_line_naming_the_leaves_and_the_flag(capsys, tmp_path):
    ckpt, out = str(POLICIES / "pi05_libero" / "ckpt"), tmp_path / "out"
    err = _error(capsys, ["--checkpoint", ckpt, "--config", "pi05_libero", "--size", "full", "--tokenizer",
                          str(POLICIES / "tokenizer.model"), "--out", str(out)])
    assert "--size full" in err and "use --size dummy" in err and len(err) < 600, err
    assert "PaliGemma/llm/embedder/input_embedding [1024, 64]" in err and "action_in_proj/kernel [32, 64]" in err
    assert "PaliGemma/img/embedding/kernel [14, 14, 3, 32]" in err
    assert not out.exists()


def test_another_family_is_one_short_line(capsys, tmp_path):
    out = tmp_path / "out"
    err = _error(capsys, ["--checkpoint", str(POLICIES / "pi0_libero" / "ckpt"), "--config", "pi05_libero",
                          "--tokenizer", str(POLICIES / "tokenizer.model"), "--out", str(out)])
    assert "openpi params do not match model.family='pi05'" in err and "more" in err and len(err) < 1200, err
    assert not out.exists() or not os.listdir(out)
