"""The VLA model family: ViT + prefix transformer + flow / action-token heads (+ value head)."""
