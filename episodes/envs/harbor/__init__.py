"""Harbor tasks (Terminal-Bench 2.0 format) as episodes: the `harbor` env, the task
loader (`task`), the image builder (`image`) and `episodes harbor check` (`check`)."""
