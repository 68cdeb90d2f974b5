"""Supervised training: the SFT loop (`loop`), starting from another run's weights (`init_from`),
and the foundation end-to-end check on a teacher-student regression (`smoke`)."""
