"""The typed, frozen configuration: `schema` (TrainConfig and its sections, the preset registry),
the sections `model`, `run`, `mesh`, the error type `errors`, openpi's train configs
`openpi`, the presets `presets/` and the generated reference `reference`."""
