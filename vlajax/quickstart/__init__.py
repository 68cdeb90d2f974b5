"""`make quickstart`: demos -> SFT -> RL -> eval on the CPU presets (`run`), then a report
folder (`report`)."""
