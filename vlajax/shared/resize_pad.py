"""Resize with pad: an image resized keeping its aspect ratio, centred on black.

tf.image.resize_with_pad's layout with openpi's size arithmetic (`openpi.shared.image_tools.resize_with_pad`,
`openpi_client.image_tools.resize_with_pad`): the one source of that arithmetic for every path,

    `pad_layout`         the resized size and its offset (plain ints; what every path computes)
    `resize_with_pad`    host side, numpy + PIL bilinear: the data pipeline (`vlajax.data.transforms`),
                         the policy server (`vlajax.serve`) and the LIBERO worker (`vlajax.libero.protocol`)
    `vlajax.policies.pi`   in the graph (jnp), with a resize function of its choice on this layout

No jax here and nothing else of ours: the LIBERO worker imports this module in its own venv (numpy, PIL).
"""

from __future__ import annotations

import numpy as np

__all__ = ["pad_layout", "resize_with_pad"]


def pad_layout(h: int, w: int, height: int, width: int) -> tuple[int, int, int, int]:
    """An image [h, w] in a [height, width] frame -> (rh, rw, top, left): resized to [rh, rw] (aspect ratio
    kept, the tighter side filling the frame; openpi's `int(cur / ratio)`) and placed at (top, left), the
    odd pixel of the border going to the bottom / right (openpi's `divmod(height - rh, 2)`)."""
    ratio = max(w / width, h / height)
    rh, rw = int(h / ratio), int(w / ratio)
    return rh, rw, (height - rh) // 2, (width - rw) // 2


def resize_with_pad(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 [h, w, C] -> uint8 [height, width, C]: PIL bilinear resize to `pad_layout`'s size, centred on
    black -- `openpi_client.image_tools.resize_with_pad` bit for bit. An image already [height, width] is
    returned as it is (as openpi_client does)."""
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    from PIL import Image

    rh, rw, top, left = pad_layout(h, w, height, width)
    out = np.zeros((height, width, img.shape[2]), np.uint8)
    out[top:top + rh, left:left + rw] = np.asarray(Image.fromarray(img).resize((rw, rh), Image.Resampling.BILINEAR))
    return out
